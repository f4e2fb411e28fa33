-- statements.delete_messages(), sent by delete_session(session_id)
-- SQLite (pysqlite): step 6 of 10, once per session deleted (with its delegate runs).

DELETE FROM messages
WHERE messages.session_id = :session_id;
