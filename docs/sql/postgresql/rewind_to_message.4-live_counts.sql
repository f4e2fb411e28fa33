-- statements.live_counts(), sent by rewind_to_message(session_id, target_message_id)
-- PostgreSQL (psycopg): step 4 of 7.

SELECT count(*) AS messages, coalesce(sum(CASE WHEN (messages.role = 'tool'
    OR messages.tool_calls IS NOT NULL AND messages.tool_calls != '' AND messages.tool_calls != '[]') THEN 1 ELSE 0 END),
    0) AS tools
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1;
