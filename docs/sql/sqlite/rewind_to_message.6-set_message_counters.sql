-- statements.set_message_counters(touched=False), sent by rewind_to_message(session_id, target_message_id)
-- SQLite (pysqlite): step 6 of 7.

UPDATE sessions
SET message_count=:message_count, tool_call_count=:tool_call_count
WHERE sessions.id = :session_id;
