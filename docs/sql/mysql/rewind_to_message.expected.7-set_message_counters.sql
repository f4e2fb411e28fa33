-- statements.set_message_counters(touched=False), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 7 of 8.

UPDATE sessions
SET message_count=:message_count, tool_call_count=:tool_call_count
WHERE sessions.id = :session_id;
