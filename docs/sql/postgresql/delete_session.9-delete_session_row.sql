-- statements.delete_session_row(), sent by delete_session(session_id)
-- PostgreSQL (psycopg): step 9 of 10, once per session deleted (with its delegate runs).

DELETE FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
