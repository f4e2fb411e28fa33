-- statements.live_head(), sent by rewind_to_message(session_id, target_message_id)
-- PostgreSQL (psycopg): step 7 of 7.

SELECT max(messages.id) AS head
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1;
