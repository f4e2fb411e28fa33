-- statements.get_messages(after=True, limited=True), sent by get_messages(session_id, limit=limit, after_id=after_id)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
    AND messages.id > :after_id::INTEGER
ORDER BY messages.id
LIMIT :limit::INTEGER;
