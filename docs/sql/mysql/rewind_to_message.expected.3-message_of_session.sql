-- statements.message_of_session(), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 8, the target must be a user message of it.

SELECT *
FROM messages
WHERE messages.id = :message_id AND messages.session_id = :session_id;
