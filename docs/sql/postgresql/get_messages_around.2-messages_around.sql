-- statements.messages_around(before=False), sent by get_messages_around(session_id, around_message_id, window)
-- PostgreSQL (psycopg): step 2 of 2, when the anchor is a message of the session.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.id > :around_message_id::INTEGER
ORDER BY messages.id
LIMIT :limit::INTEGER;
