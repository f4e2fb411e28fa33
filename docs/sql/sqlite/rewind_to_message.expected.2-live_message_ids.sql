-- statements.live_message_ids(), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- SQLite (pysqlite): step 2 of 8, to compare with expected_active_ids.

SELECT messages.id
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1
ORDER BY messages.id;
