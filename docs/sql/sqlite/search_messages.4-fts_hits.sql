-- statements.fts_hits(index='messages_fts_trigram', order=None, chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False), by_ids=True), sent by search_messages('deployscript')
-- SQLite (pysqlite): step 4 of 6, the page's rows.

SELECT messages.id, messages.session_id, messages.role, snippet(messages_fts_trigram, -1, '>>>',
    '<<<', '...', 40) AS snippet, messages.timestamp, messages.tool_name, sessions.source,
    sessions.model, sessions.started_at AS session_started
FROM messages_fts_trigram
JOIN messages ON messages.id = messages_fts_trigram.rowid
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages_fts_trigram MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden' AND messages_fts_trigram.rowid IN (
      SELECT ids.value
      FROM json_each(:ids) AS ids
    );
