-- statements.session_locked(), sent by clear_session_messages(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 6, the session must exist.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id
FOR UPDATE;
