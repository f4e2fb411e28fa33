-- statements.live_head(), sent by rewind_to_message(session_id, target_message_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 7 of 7.

SELECT max(messages.id) AS head
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1;
