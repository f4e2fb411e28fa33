-- statements.set_title_source(), sent by set_session_title_source(session_id, source)
-- PostgreSQL (psycopg): the operation's one statement.

UPDATE sessions
SET title_source=:title_source::VARCHAR
WHERE sessions.id = :session_id::VARCHAR AND sessions.title IS NOT NULL;
