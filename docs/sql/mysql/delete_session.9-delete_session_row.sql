-- statements.delete_session_row(), sent by delete_session(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 9 of 10, once per session deleted (with its delegate runs).

DELETE FROM sessions
WHERE sessions.id = :session_id;
