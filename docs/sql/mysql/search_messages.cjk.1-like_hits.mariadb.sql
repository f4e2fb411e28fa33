-- statements.like_hits(dialect='mysql', shape=((False,),), order='newest', chosen=SearchFilter(include_inactive=False, by_sources=True, excluding_sources=True, by_roles=True)), sent by search_messages('大别山项目', source_filter=[...], exclude_sources=[...], role_filter=[...], sort='newest')
-- MariaDB 10.11 (PyMySQL): step 1 of 3.
-- :sources is a list: one parameter per item.
-- :exclude_sources is a list: one parameter per item.
-- :roles is a list: one parameter per item.

SELECT messages.id, messages.session_id, messages.role, messages.content, messages.timestamp,
    messages.tool_name, sessions.source, sessions.model, sessions.started_at AS session_started,
    messages.tool_calls
FROM messages INNER
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages.content LIKE :t0_0 ESCAPE '!' OR messages.tool_name LIKE :t0_0 ESCAPE '!'
    OR messages.tool_calls LIKE :t0_0 ESCAPE '!')
    AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden' AND sessions.source IN (:sources)
    AND (sessions.source NOT IN (:exclude_sources)) AND messages.role IN (:roles)
ORDER BY messages.timestamp DESC, messages.id DESC
LIMIT :offset, :limit;
