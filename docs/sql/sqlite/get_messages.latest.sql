-- statements.get_messages(newest_first=True, limited=True), sent by get_messages(session_id, limit=limit, latest=True)
-- SQLite (pysqlite): the operation's one statement.
-- Parameters the statement carries: :param_1 = 0.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1
ORDER BY messages.id DESC
LIMIT :limit
OFFSET :param_1;
