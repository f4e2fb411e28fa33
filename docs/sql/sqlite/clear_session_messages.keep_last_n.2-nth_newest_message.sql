-- statements.nth_newest_message(), sent by clear_session_messages(session_id, keep_last_n=n)
-- SQLite (pysqlite): step 2 of 6.
-- Parameters the statement carries: :param_1 = 1.

SELECT messages.id
FROM messages
WHERE messages.session_id = :session_id
ORDER BY messages.id DESC
LIMIT :param_1
OFFSET :skip;
