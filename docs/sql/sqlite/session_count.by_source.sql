-- statements.count_sessions(by_source=True), sent by session_count(source)
-- SQLite (pysqlite): the operation's one statement.

SELECT count(*) AS count
FROM sessions
WHERE sessions.source = :source;
