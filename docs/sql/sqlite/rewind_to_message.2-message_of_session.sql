-- statements.message_of_session(), sent by rewind_to_message(session_id, target_message_id)
-- SQLite (pysqlite): step 2 of 7, the target must be a user message of it.

SELECT *
FROM messages
WHERE messages.id = :message_id AND messages.session_id = :session_id;
