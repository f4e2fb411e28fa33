-- statements.delete_messages(), sent by clear_session_messages(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 6.

DELETE FROM messages
WHERE messages.session_id = :session_id;
