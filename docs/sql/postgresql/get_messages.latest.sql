-- statements.get_messages(newest_first=True, limited=True), sent by get_messages(session_id, limit=limit, latest=True)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
ORDER BY messages.id DESC
LIMIT :limit::INTEGER;
