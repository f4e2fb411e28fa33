-- statements.finish_imported_session(), sent by import_sessions(sessions)
-- SQLite (pysqlite): step 6 of 8, its counters and end, once its messages are in.

UPDATE sessions
SET ended_at=:ended, end_reason=:reason, message_count=:messages_total,
    tool_call_count=:tool_calls_total
WHERE sessions.id = :session_id;
