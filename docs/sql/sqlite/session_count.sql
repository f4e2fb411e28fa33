-- statements.count_listed_sessions(dialect='sqlite', chosen=SessionFilter(listable_only=False, by_sources=False, by_session_key=False, excluding_sources=False, by_cwd=False, by_message_count=False, archived='live', visible_only=False, own_dm=False)), sent by session_count()
-- SQLite (pysqlite): the operation's one statement.

SELECT count(*) AS count
FROM sessions
WHERE sessions.archived = 0;
