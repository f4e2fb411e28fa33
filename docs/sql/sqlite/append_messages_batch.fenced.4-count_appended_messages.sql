-- statements.count_appended_messages(), sent by append_messages_batch(session_id, messages, turn_lease_holder=holder)
-- SQLite (pysqlite): step 4 of 5, the session must exist.

UPDATE sessions
SET message_count=(sessions.message_count + :messages_added),
    tool_call_count=(sessions.tool_call_count + :tool_calls_added)
WHERE sessions.id = :session_id AND (sessions.ended_at IS NULL OR sessions.end_reason IS NULL
    OR sessions.end_reason != 'compression');
