-- statements.delete_messages(), sent by prune_sessions(older_than_days)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 6 of 10, once per session deleted.

DELETE FROM messages
WHERE messages.session_id = :session_id;
