-- statements.count_message_rows(by_session=True), sent by message_count(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT count(*) AS count
FROM messages
WHERE messages.session_id = :session_id;
