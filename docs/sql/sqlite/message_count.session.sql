-- statements.count_message_rows(by_session=True), sent by message_count(session_id)
-- SQLite (pysqlite): the operation's one statement.

SELECT count(*) AS count
FROM messages
WHERE messages.session_id = :session_id;
