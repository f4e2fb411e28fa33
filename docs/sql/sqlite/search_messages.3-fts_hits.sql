-- statements.fts_hits(index='messages_fts_trigram', order=None, chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('deployscript')
-- SQLite (pysqlite): step 3 of 5, only when the words found nothing and every term has 3 characters.

SELECT messages.id, messages.session_id, messages.role, snippet(messages_fts_trigram, -1, '>>>',
    '<<<', '...', 40) AS snippet, messages.timestamp, messages.tool_name, sessions.source,
    sessions.model, sessions.started_at AS session_started
FROM messages_fts_trigram
JOIN messages ON messages.id = messages_fts_trigram.rowid
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages_fts_trigram MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden'
ORDER BY messages_fts_trigram.rank
LIMIT :limit
OFFSET :offset;
