-- statements.some_sessions(), sent by session_count_ge(n)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT 1 AS one
FROM sessions
LIMIT :limit;
