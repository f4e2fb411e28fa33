-- statements.count_message_rows(by_session=False), sent by message_count()
-- SQLite (pysqlite): the operation's one statement.

SELECT count(*) AS count
FROM messages;
