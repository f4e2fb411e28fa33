-- statements.live_tool_calls(), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- PostgreSQL (psycopg): step 6 of 8.

SELECT messages.tool_calls
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
    AND messages.tool_calls IS NOT NULL;
