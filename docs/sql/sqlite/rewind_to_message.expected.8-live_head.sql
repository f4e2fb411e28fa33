-- statements.live_head(), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- SQLite (pysqlite): step 8 of 8.

SELECT max(messages.id) AS head
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1;
