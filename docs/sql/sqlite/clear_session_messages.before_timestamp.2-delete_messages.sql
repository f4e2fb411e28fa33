-- statements.delete_messages(before_timestamp=True), sent by clear_session_messages(session_id, before_timestamp=when)
-- SQLite (pysqlite): step 2 of 5.

DELETE FROM messages
WHERE messages.session_id = :session_id AND messages.timestamp < :before;
