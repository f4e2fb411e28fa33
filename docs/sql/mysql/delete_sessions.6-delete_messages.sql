-- statements.delete_messages(), sent by delete_sessions(session_ids)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 6 of 10, once per session deleted (with its delegate runs).

DELETE FROM messages
WHERE messages.session_id = :session_id;
