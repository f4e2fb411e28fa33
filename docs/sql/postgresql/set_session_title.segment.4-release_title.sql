-- statements.release_title(with_source=False), sent by set_session_title(session_id, title), the title held by an earlier compression segment of the session
-- PostgreSQL (psycopg): step 4 of 5.

UPDATE sessions
SET title=NULL
WHERE sessions.id = :holder_id::VARCHAR;
