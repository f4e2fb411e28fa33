-- statements.count_appended_message(), sent by append_message(session_id, role, content, turn_lease_holder=holder)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 5 of 5.
-- Parameters the statement carries: :message_count_1 = 1.

UPDATE sessions
SET message_count=(sessions.message_count + :message_count_1),
    tool_call_count=(sessions.tool_call_count + :tool_calls_added)
WHERE sessions.id = :session_id;
