-- statements.count_all_messages(), sent by message_count()
-- PostgreSQL (psycopg): the operation's one statement.

SELECT count(*) AS count
FROM messages
WHERE messages.active = 1;
