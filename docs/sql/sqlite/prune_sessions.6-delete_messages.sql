-- statements.delete_messages(), sent by prune_sessions(older_than_days)
-- SQLite (pysqlite): step 6 of 10, once per session deleted.

DELETE FROM messages
WHERE messages.session_id = :session_id;
