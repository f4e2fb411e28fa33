-- statements.set_imported_parent(), sent by import_sessions(sessions)
-- PostgreSQL (psycopg): step 8 of 8, once per new record whose parent is there.

UPDATE sessions
SET parent_session_id=:parent::VARCHAR
WHERE sessions.id = :session_id::VARCHAR;
