-- statements.fts_ranked_ids(index='messages_fts', chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('deployscript')
-- SQLite (pysqlite): step 2 of 6, the page's ids, ranked (found: their rows, as from the trigrams below).
-- Parameters the statement carries: :param_1 = 0.

SELECT candidates.id
FROM (
  SELECT messages_fts.rowid AS id, messages_fts.rank AS relevance
  FROM messages_fts
  JOIN messages ON messages.id = messages_fts.rowid
  JOIN sessions ON sessions.id = messages.session_id
  WHERE (messages_fts MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
      AND coalesce(messages.display_kind, '') != 'hidden'
  ORDER BY messages_fts.rowid DESC
  LIMIT :candidates
  OFFSET :param_1
) AS candidates
ORDER BY candidates.relevance, candidates.id DESC
LIMIT :limit
OFFSET :offset;
