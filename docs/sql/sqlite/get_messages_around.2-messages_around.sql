-- statements.messages_around(before=False), sent by get_messages_around(session_id, around_message_id, window)
-- SQLite (pysqlite): step 2 of 2, when the anchor is a message of the session.
-- Parameters the statement carries: :param_1 = 0.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.id > :around_message_id
ORDER BY messages.id
LIMIT :limit
OFFSET :param_1;
