-- statements.get_title(), sent by get_session_title(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT sessions.title
FROM sessions
WHERE sessions.id = :session_id;
