-- statements.count_message_rows(by_session=False), sent by message_count()
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT count(*) AS count
FROM messages;
