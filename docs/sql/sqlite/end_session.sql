-- statements.end_session(), sent by end_session(session_id, end_reason)
-- SQLite (pysqlite): the operation's one statement.

UPDATE sessions
SET ended_at=:now, end_reason=:end_reason
WHERE sessions.id = :session_id AND sessions.ended_at IS NULL;
