-- statements.finish_imported_session(), sent by import_sessions(sessions)
-- PostgreSQL (psycopg): step 6 of 8, its counters and end, once its messages are in.

UPDATE sessions
SET ended_at=:ended, end_reason=:reason::VARCHAR, message_count=:messages_total::INTEGER,
    tool_call_count=:tool_calls_total::INTEGER
WHERE sessions.id = :session_id::VARCHAR;
