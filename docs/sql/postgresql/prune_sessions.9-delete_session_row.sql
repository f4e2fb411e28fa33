-- statements.delete_session_row(), sent by prune_sessions(older_than_days)
-- PostgreSQL (psycopg): step 9 of 10, once per session deleted.

DELETE FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
