-- statements.get_messages(limited=True, skipped=True), sent by get_messages(session_id, limit=limit, offset=offset)
-- SQLite (pysqlite): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1
ORDER BY messages.id
LIMIT :limit
OFFSET :offset;
