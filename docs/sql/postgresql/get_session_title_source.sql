-- statements.title_state(), sent by get_session_title_source(session_id)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT sessions.title, sessions.title_source, sessions.hidden
FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
