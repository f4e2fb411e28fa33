-- statements.tsvector_hits(order=None, chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('deployscript')
-- PostgreSQL (psycopg): step 1 of 4.

SELECT candidates.id, candidates.session_id, candidates.role, candidates.content,
    candidates.timestamp, candidates.tool_name, candidates.source, candidates.model,
    candidates.session_started
FROM (
  SELECT messages.id AS id, messages.session_id AS session_id, messages.role AS role,
      messages.content AS content, messages.timestamp AS timestamp, messages.tool_name AS tool_name,
      sessions.source AS source, sessions.model AS model, sessions.started_at AS session_started,
      ts_rank(to_tsvector('simple'::regconfig, left(coalesce(content, '') || ' '
          || coalesce(tool_name, '') || ' ' || coalesce(tool_calls, ''), 100000)),
          websearch_to_tsquery('simple'::regconfig, :query)) AS relevance
  FROM messages
  JOIN sessions ON sessions.id = messages.session_id
  WHERE (to_tsvector('simple'::regconfig, left(coalesce(content, '') || ' ' || coalesce(tool_name,
      '') || ' ' || coalesce(tool_calls, ''), 100000)) @@ websearch_to_tsquery('simple'::regconfig,
      :query)) AND (messages.active = 1 OR messages.compacted = 1)
      AND coalesce(messages.display_kind, '') != 'hidden'
  LIMIT :candidates
) AS candidates
ORDER BY candidates.relevance DESC, candidates.id DESC
LIMIT :limit
OFFSET :offset;
