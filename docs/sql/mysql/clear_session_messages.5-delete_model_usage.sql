-- statements.delete_model_usage(), sent by clear_session_messages(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 5 of 6, when no message is left.

DELETE FROM session_model_usage
WHERE session_model_usage.session_id = :session_id;
