-- statements.get_messages(limited=True, skipped=True), sent by get_messages(session_id, limit=limit, offset=offset)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
ORDER BY messages.id
LIMIT :limit::INTEGER
OFFSET :offset::INTEGER;
