-- statements.tsvector_candidates(chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('common', limit=5, offset=1005)
-- PostgreSQL (psycopg): step 1 of 5.

SELECT messages.id, ts_rank(to_tsvector('simple'::regconfig, left(coalesce(content, '') || ' '
    || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''), 100000)),
    websearch_to_tsquery('simple'::regconfig, :query)) AS relevance
FROM messages
JOIN sessions ON sessions.id = messages.session_id
WHERE (to_tsvector('simple'::regconfig, left(coalesce(content, '') || ' ' || coalesce(tool_name, '')
    || ' ' || coalesce(tool_calls, ''), 100000)) @@ websearch_to_tsquery('simple'::regconfig, :query))
    AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden'
LIMIT :candidates;
