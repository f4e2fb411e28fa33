-- statements.delete_messages(), sent by clear_session_messages(session_id)
-- SQLite (pysqlite): step 2 of 6.

DELETE FROM messages
WHERE messages.session_id = :session_id;
