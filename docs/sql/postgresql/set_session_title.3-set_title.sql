-- statements.set_title(), sent by set_session_title(session_id, title)
-- PostgreSQL (psycopg): step 3 of 3.

UPDATE sessions
SET title=:title::VARCHAR, title_source=:title_source::VARCHAR
WHERE sessions.id = :session_id::VARCHAR;
