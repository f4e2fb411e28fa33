-- statements.set_message_counters(touched=False), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- PostgreSQL (psycopg): step 7 of 8.

UPDATE sessions
SET message_count=:message_count::INTEGER, tool_call_count=:tool_call_count::INTEGER
WHERE sessions.id = :session_id::VARCHAR;
