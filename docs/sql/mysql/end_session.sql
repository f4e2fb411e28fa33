-- statements.end_session(), sent by end_session(session_id, end_reason)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

UPDATE sessions
SET ended_at=:now, end_reason=:end_reason
WHERE sessions.id = :session_id AND sessions.ended_at IS NULL;
