-- statements.parent_of(), sent by import_sessions(sessions)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 7 of 8, per step of the walk that refuses a cycle of parents.

SELECT sessions.parent_session_id
FROM sessions
WHERE sessions.id = :session_id;
