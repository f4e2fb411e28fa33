-- statements.set_message_counters(touched=False), sent by rewind_to_message(session_id, target_message_id)
-- PostgreSQL (psycopg): step 6 of 7.

UPDATE sessions
SET message_count=:message_count::INTEGER, tool_call_count=:tool_call_count::INTEGER
WHERE sessions.id = :session_id::VARCHAR;
