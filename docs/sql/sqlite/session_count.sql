-- statements.count_sessions(by_source=False), sent by session_count()
-- SQLite (pysqlite): the operation's one statement.

SELECT count(*) AS count
FROM sessions;
