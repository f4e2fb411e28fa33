-- statements.count_sessions(by_source=True), sent by session_count(source)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT count(*) AS count
FROM sessions
WHERE sessions.source = :source;
