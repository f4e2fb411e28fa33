-- statements.get_title(), sent by get_session_title(session_id)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT sessions.title
FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
