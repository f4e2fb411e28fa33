-- statements.like_hits(dialect='mysql', shape=((False,), (False,)), order='newest', chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('广西 OR 桂林')
-- MariaDB 10.11 (PyMySQL): step 1 of 3.

SELECT messages.id, messages.session_id, messages.role, messages.content, messages.timestamp,
    messages.tool_name, sessions.source, sessions.model, sessions.started_at AS session_started,
    messages.tool_calls
FROM messages INNER
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages.content LIKE :t0_0 ESCAPE '!' OR messages.tool_name LIKE :t0_0 ESCAPE '!'
    OR messages.tool_calls LIKE :t0_0 ESCAPE '!' OR messages.content LIKE :t1_0 ESCAPE '!'
    OR messages.tool_name LIKE :t1_0 ESCAPE '!' OR messages.tool_calls LIKE :t1_0 ESCAPE '!')
    AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden'
ORDER BY messages.timestamp DESC, messages.id DESC
LIMIT :offset, :limit;
