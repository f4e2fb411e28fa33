-- statements.count_sessions_by_source(dialect='postgresql', chosen=SessionFilter(listable_only=False, by_sources=False, by_session_key=False, excluding_sources=False, by_cwd=False, by_message_count=False, archived='live', visible_only=False, own_dm=False)), sent by session_count_by_source()
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :empty = ''.

SELECT coalesce(nullif(sessions.source, :empty::VARCHAR), 'cli') AS source, count(*) AS count
FROM sessions
WHERE sessions.archived = 0
GROUP BY coalesce(nullif(sessions.source, :empty::VARCHAR), 'cli')
ORDER BY count DESC;
