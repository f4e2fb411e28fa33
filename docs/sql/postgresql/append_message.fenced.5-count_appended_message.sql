-- statements.count_appended_message(), sent by append_message(session_id, role, content, turn_lease_holder=holder)
-- PostgreSQL (psycopg): step 5 of 5.
-- Parameters the statement carries: :message_count_1 = 1.

UPDATE sessions
SET message_count=(sessions.message_count + :message_count_1::INTEGER),
    tool_call_count=(sessions.tool_call_count + :tool_calls_added::INTEGER)
WHERE sessions.id = :session_id::VARCHAR;
