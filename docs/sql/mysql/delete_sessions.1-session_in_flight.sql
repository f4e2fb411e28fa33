-- statements.session_in_flight(), sent by delete_sessions(session_ids)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 10, once for each session given, then once per delegate run.

SELECT sessions.id, sessions.handoff_state
FROM sessions
WHERE sessions.id = :session_id;
