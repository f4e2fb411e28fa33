-- statements.set_message_counters(touched=False), sent by rewind_to_message(session_id, target_message_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 6 of 7.

UPDATE sessions
SET message_count=:message_count, tool_call_count=:tool_call_count
WHERE sessions.id = :session_id;
