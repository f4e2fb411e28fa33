-- statements.set_message_counters(touched=True), sent by clear_session_messages(session_id, before_timestamp=when)
-- SQLite (pysqlite): step 4 of 5, when messages are left.

UPDATE sessions
SET message_count=:message_count, tool_call_count=:tool_call_count, last_activity_at=:now
WHERE sessions.id = :session_id;
