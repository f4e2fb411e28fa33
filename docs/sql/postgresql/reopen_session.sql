-- statements.reopen_session(), sent by reopen_session(session_id)
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :ended_at = NULL, :end_reason = NULL.

UPDATE sessions
SET ended_at=:ended_at, end_reason=:end_reason::VARCHAR
WHERE sessions.id = :session_id::VARCHAR;
