-- statements.fts_candidates(index='messages_fts_trigram', chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('deployscript')
-- SQLite (pysqlite): step 3 of 6, only when the words found nothing and every term has 3 characters.
-- Parameters the statement carries: :param_1 = 0.

SELECT messages_fts_trigram.rowid AS id, messages_fts_trigram.rank AS relevance
FROM messages_fts_trigram
JOIN messages ON messages.id = messages_fts_trigram.rowid
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages_fts_trigram MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden'
ORDER BY messages_fts_trigram.rowid DESC
LIMIT :candidates
OFFSET :param_1;
