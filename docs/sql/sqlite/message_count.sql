-- statements.count_all_messages(), sent by message_count()
-- SQLite (pysqlite): the operation's one statement.

SELECT count(*) AS count
FROM messages
WHERE messages.active = 1;
