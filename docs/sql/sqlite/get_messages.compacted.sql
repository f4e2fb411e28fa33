-- statements.get_messages(visibility=Visibility.DISPLAY), sent by get_messages(session_id, include_compacted=True)
-- SQLite (pysqlite): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND (messages.active = 1 OR messages.compacted = 1)
ORDER BY messages.id;
