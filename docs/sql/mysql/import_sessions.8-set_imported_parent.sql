-- statements.set_imported_parent(), sent by import_sessions(sessions)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 8 of 8, once per new record whose parent is there.

UPDATE sessions
SET parent_session_id=:parent
WHERE sessions.id = :session_id;
