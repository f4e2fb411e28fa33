-- statements.get_messages(after=True, limited=True), sent by get_messages(session_id, limit=limit, after_id=after_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1 AND messages.id > :after_id
ORDER BY messages.id
LIMIT :limit;
