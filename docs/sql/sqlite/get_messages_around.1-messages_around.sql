-- statements.messages_around(before=True), sent by get_messages_around(session_id, around_message_id, window)
-- SQLite (pysqlite): step 1 of 2.
-- Parameters the statement carries: :param_1 = 0.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.id <= :around_message_id
ORDER BY messages.id DESC
LIMIT :limit
OFFSET :param_1;
