-- statements.delete_model_usage(), sent by clear_session_messages(session_id)
-- SQLite (pysqlite): step 5 of 6, when no message is left.

DELETE FROM session_model_usage
WHERE session_model_usage.session_id = :session_id;
