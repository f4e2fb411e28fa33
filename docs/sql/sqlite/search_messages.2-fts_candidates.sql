-- statements.fts_candidates(index='messages_fts', chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('deployscript')
-- SQLite (pysqlite): step 2 of 6, the newest matches, ranked here (found: the page's rows, as below).
-- Parameters the statement carries: :param_1 = 0.

SELECT messages_fts.rowid AS id, messages_fts.rank AS relevance
FROM messages_fts
JOIN messages ON messages.id = messages_fts.rowid
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages_fts MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden'
ORDER BY messages_fts.rowid DESC
LIMIT :candidates
OFFSET :param_1;
