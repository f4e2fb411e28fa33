-- statements.count_appended_messages(), sent by append_messages_batch(session_id, messages, turn_lease_holder=holder)
-- PostgreSQL (psycopg): step 4 of 5, the session must exist.

UPDATE sessions
SET message_count=(sessions.message_count + :messages_added::INTEGER),
    tool_call_count=(sessions.tool_call_count + :tool_calls_added::INTEGER)
WHERE sessions.id = :session_id::VARCHAR AND (sessions.ended_at IS NULL
    OR sessions.end_reason IS NULL OR sessions.end_reason != 'compression');
