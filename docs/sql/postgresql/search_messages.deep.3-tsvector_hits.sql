-- statements.tsvector_hits(order=None, chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False), by_ids=True), sent by search_messages('common', limit=5, offset=1005)
-- PostgreSQL (psycopg): step 3 of 5.

SELECT messages.id, messages.session_id, messages.role, messages.content, messages.timestamp,
    messages.tool_name, sessions.source, sessions.model, sessions.started_at AS session_started
FROM messages
JOIN sessions ON sessions.id = messages.session_id
WHERE messages.id = ANY (:ids::INTEGER[]);
