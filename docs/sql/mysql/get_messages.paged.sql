-- statements.get_messages(limited=True, skipped=True), sent by get_messages(session_id, limit=limit, offset=offset)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1
ORDER BY messages.id
LIMIT :offset, :limit;
