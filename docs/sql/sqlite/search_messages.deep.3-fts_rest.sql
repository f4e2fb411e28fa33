-- statements.fts_rest(index='messages_fts', chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('common', limit=5, offset=1005)
-- SQLite (pysqlite): step 3 of 6, the page's part past them.

SELECT messages_fts.rowid AS id
FROM messages_fts
JOIN messages ON messages.id = messages_fts.rowid
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages_fts MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden' AND (messages_fts.rowid NOT IN (
      SELECT exclude.value
      FROM json_each(:exclude) AS exclude
    ))
ORDER BY messages_fts.rowid DESC
LIMIT :limit
OFFSET :offset;
