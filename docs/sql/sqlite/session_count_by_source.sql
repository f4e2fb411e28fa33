-- statements.count_sessions_by_source(dialect='sqlite', chosen=SessionFilter(listable_only=False, by_sources=False, by_session_key=False, excluding_sources=False, by_cwd=False, by_message_count=False, archived='live', visible_only=False, own_dm=False)), sent by session_count_by_source()
-- SQLite (pysqlite): the operation's one statement.
-- Parameters the statement carries: :empty = ''.

SELECT coalesce(nullif(sessions.source, :empty), 'cli') AS source, count(*) AS count
FROM sessions
WHERE sessions.archived = 0
GROUP BY coalesce(nullif(sessions.source, :empty), 'cli')
ORDER BY count DESC;
