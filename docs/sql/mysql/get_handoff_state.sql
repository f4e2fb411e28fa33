-- statements.get_handoff_state(), sent by get_handoff_state(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT sessions.handoff_state AS state, sessions.handoff_platform AS platform,
    sessions.handoff_error AS error
FROM sessions
WHERE sessions.id = :session_id;
