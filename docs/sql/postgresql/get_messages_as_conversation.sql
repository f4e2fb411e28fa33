-- statements.get_messages(visibility=Visibility.LIVE), sent by get_messages_as_conversation(session_id)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
ORDER BY messages.id;
