-- statements.end_session(), sent by end_session(session_id, end_reason)
-- PostgreSQL (psycopg): the operation's one statement.

UPDATE sessions
SET ended_at=:now, end_reason=:end_reason::VARCHAR
WHERE sessions.id = :session_id::VARCHAR AND sessions.ended_at IS NULL;
