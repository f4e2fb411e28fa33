-- statements.reopen_session(), sent by reopen_session(session_id)
-- SQLite (pysqlite): the operation's one statement.
-- Parameters the statement carries: :ended_at = NULL, :end_reason = NULL.

UPDATE sessions
SET ended_at=:ended_at, end_reason=:end_reason
WHERE sessions.id = :session_id;
