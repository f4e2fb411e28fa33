-- statements.delete_messages(before_id=True), sent by clear_session_messages(session_id, keep_last_n=n)
-- SQLite (pysqlite): step 3 of 6, when there are more.

DELETE FROM messages
WHERE messages.session_id = :session_id AND messages.id < :before_id;
