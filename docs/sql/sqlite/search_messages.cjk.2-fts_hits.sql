-- statements.fts_hits(index='messages_fts_trigram', order='newest', chosen=SearchFilter(include_inactive=False, by_sources=True, excluding_sources=True, by_roles=True)), sent by search_messages('大别山项目', source_filter=[...], exclude_sources=[...], role_filter=[...], sort='newest')
-- SQLite (pysqlite): step 2 of 4.

SELECT messages.id, messages.session_id, messages.role, snippet(messages_fts_trigram, -1, '>>>',
    '<<<', '...', 40) AS snippet, messages.timestamp, messages.tool_name, sessions.source,
    sessions.model, sessions.started_at AS session_started
FROM messages_fts_trigram
JOIN messages ON messages.id = messages_fts_trigram.rowid
JOIN sessions ON sessions.id = messages.session_id
WHERE (messages_fts_trigram MATCH :query) AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden' AND sessions.source IN (
      SELECT sources.value
      FROM json_each(:sources) AS sources
    ) AND (sessions.source NOT IN (
      SELECT exclude_sources.value
      FROM json_each(:exclude_sources) AS exclude_sources
    )) AND messages.role IN (
      SELECT roles.value
      FROM json_each(:roles) AS roles
    )
ORDER BY messages.timestamp DESC, messages_fts_trigram.rank
LIMIT :limit
OFFSET :offset;
