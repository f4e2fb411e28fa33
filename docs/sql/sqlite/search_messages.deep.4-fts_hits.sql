-- statements.fts_hits(index='messages_fts', order=None, chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False), by_ids=True), sent by search_messages('common', limit=5, offset=1005)
-- SQLite (pysqlite): step 4 of 6.

SELECT messages.id, messages.session_id, messages.role, snippet(messages_fts, -1, '>>>', '<<<',
    '...', 40) AS snippet, messages.timestamp, messages.tool_name, sessions.source, sessions.model,
    sessions.started_at AS session_started
FROM messages_fts
JOIN messages ON messages.id = messages_fts.rowid
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages_fts MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden' AND messages_fts.rowid IN (
      SELECT ids.value
      FROM json_each(:ids) AS ids
    );
