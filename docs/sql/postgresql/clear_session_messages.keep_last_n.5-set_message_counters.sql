-- statements.set_message_counters(touched=True), sent by clear_session_messages(session_id, keep_last_n=n)
-- PostgreSQL (psycopg): step 5 of 6, when messages are left.

UPDATE sessions
SET message_count=:message_count::INTEGER, tool_call_count=:tool_call_count::INTEGER,
    last_activity_at=:now
WHERE sessions.id = :session_id::VARCHAR;
