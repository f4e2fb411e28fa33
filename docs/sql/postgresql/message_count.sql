-- statements.count_message_rows(by_session=False), sent by message_count()
-- PostgreSQL (psycopg): the operation's one statement.

SELECT count(*) AS count
FROM messages;
