-- statements.orphan_children(), sent by prune_sessions(older_than_days)
-- PostgreSQL (psycopg): step 5 of 10, once per session deleted.
-- Parameters the statement carries: :parent_session_id = NULL.

UPDATE sessions
SET parent_session_id=:parent_session_id::VARCHAR
WHERE sessions.parent_session_id = :session_id::VARCHAR;
