-- statements.like_hits(dialect='postgresql', shape=((False,), (False,)), order='newest', chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('广西 OR 桂林')
-- PostgreSQL (psycopg): step 1 of 3.

SELECT messages.id, messages.session_id, messages.role, messages.content, messages.timestamp,
    messages.tool_name, sessions.source, sessions.model, sessions.started_at AS session_started,
    messages.tool_calls
FROM messages
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages.content ILIKE :t0_0::VARCHAR ESCAPE '!'
    OR messages.tool_name ILIKE :t0_0::VARCHAR ESCAPE '!'
    OR messages.tool_calls ILIKE :t0_0::VARCHAR ESCAPE '!'
    OR messages.content ILIKE :t1_0::VARCHAR ESCAPE '!'
    OR messages.tool_name ILIKE :t1_0::VARCHAR ESCAPE '!'
    OR messages.tool_calls ILIKE :t1_0::VARCHAR ESCAPE '!') AND (messages.active = 1
        OR messages.compacted = 1) AND coalesce(messages.display_kind, '') != 'hidden'
ORDER BY messages.timestamp DESC, messages.id DESC
LIMIT :limit
OFFSET :offset;
