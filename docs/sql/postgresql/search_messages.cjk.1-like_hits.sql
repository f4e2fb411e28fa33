-- statements.like_hits(dialect='postgresql', shape=((False,),), order='newest', chosen=SearchFilter(include_inactive=False, by_sources=True, excluding_sources=True, by_roles=True)), sent by search_messages('大别山项目', source_filter=[...], exclude_sources=[...], role_filter=[...], sort='newest')
-- PostgreSQL (psycopg): step 1 of 3.

SELECT messages.id, messages.session_id, messages.role, messages.content, messages.timestamp,
    messages.tool_name, sessions.source, sessions.model, sessions.started_at AS session_started,
    messages.tool_calls
FROM messages
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages.content ILIKE :t0_0::VARCHAR ESCAPE '!'
    OR messages.tool_name ILIKE :t0_0::VARCHAR ESCAPE '!'
    OR messages.tool_calls ILIKE :t0_0::VARCHAR ESCAPE '!') AND (messages.active = 1
        OR messages.compacted = 1) AND coalesce(messages.display_kind, '') != 'hidden'
    AND sessions.source = ANY (:sources::VARCHAR[])
    AND NOT (sessions.source = ANY (:exclude_sources::VARCHAR[]))
    AND messages.role = ANY (:roles::VARCHAR[])
ORDER BY messages.timestamp DESC, messages.id DESC
LIMIT :limit
OFFSET :offset;
