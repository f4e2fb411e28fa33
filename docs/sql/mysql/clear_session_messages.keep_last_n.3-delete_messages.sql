-- statements.delete_messages(before_id=True), sent by clear_session_messages(session_id, keep_last_n=n)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 6, when there are more.

DELETE FROM messages
WHERE messages.session_id = :session_id AND messages.id < :before_id;
