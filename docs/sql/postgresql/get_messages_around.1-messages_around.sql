-- statements.messages_around(before=True), sent by get_messages_around(session_id, around_message_id, window)
-- PostgreSQL (psycopg): step 1 of 2.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.id <= :around_message_id::INTEGER
ORDER BY messages.id DESC
LIMIT :limit::INTEGER;
