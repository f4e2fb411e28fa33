-- statements.session_exists(), sent by import_sessions(sessions)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 8, once per record: an id already stored is skipped.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id;
