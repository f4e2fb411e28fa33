-- statements.nth_newest_message(), sent by clear_session_messages(session_id, keep_last_n=n)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 6.
-- Parameters the statement carries: :param_1 = 1.

SELECT messages.id
FROM messages
WHERE messages.session_id = :session_id
ORDER BY messages.id DESC
LIMIT :skip, :param_1;
