-- statements.count_sessions(by_source=False), sent by session_count()
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT count(*) AS count
FROM sessions;
