-- statements.tsvector_hits(order=None, chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False), by_ids=True), sent by search_messages('common', limit=5, offset=1005)
-- PostgreSQL (psycopg): step 3 of 5.

SELECT messages.id, messages.session_id, messages.role, messages.content, messages.timestamp,
    messages.tool_name, sessions.source, sessions.model, sessions.started_at AS session_started
FROM messages
JOIN sessions ON sessions.id = messages.session_id
WHERE (to_tsvector('simple'::regconfig, left(coalesce(content, '') || ' ' || coalesce(tool_name, '')
    || ' ' || coalesce(tool_calls, ''), 100000)) @@ websearch_to_tsquery('simple'::regconfig, :query))
    AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden' AND messages.id = ANY (:ids::INTEGER[]);
