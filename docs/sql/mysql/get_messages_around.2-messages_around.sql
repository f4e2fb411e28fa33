-- statements.messages_around(before=False), sent by get_messages_around(session_id, around_message_id, window)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2, when the anchor is a message of the session.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.id > :around_message_id
ORDER BY messages.id
LIMIT :limit;
