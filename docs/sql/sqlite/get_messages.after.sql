-- statements.get_messages(after=True, limited=True), sent by get_messages(session_id, limit=limit, after_id=after_id)
-- SQLite (pysqlite): the operation's one statement.
-- Parameters the statement carries: :param_1 = 0.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1 AND messages.id > :after_id
ORDER BY messages.id
LIMIT :limit
OFFSET :param_1;
