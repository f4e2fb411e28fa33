-- statements.session_exists(), sent by resolve_session_id(session_id_or_prefix)
-- PostgreSQL (psycopg): step 1 of 2.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
