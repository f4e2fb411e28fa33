-- statements.live_counts(), sent by clear_session_messages(session_id, keep_last_n=n)
-- MariaDB 10.11 (PyMySQL): step 4 of 6.

SELECT count(*) AS messages, coalesce(sum(CASE WHEN (messages.role = 'tool'
    OR messages.tool_calls IS NOT NULL AND messages.tool_calls != '' AND messages.tool_calls != '[]') THEN 1 ELSE 0 END),
    0) AS tools
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1;
