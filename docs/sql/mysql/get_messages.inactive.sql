-- statements.get_messages(visibility=Visibility.ALL), sent by get_messages(session_id, include_inactive=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id
ORDER BY messages.id;
