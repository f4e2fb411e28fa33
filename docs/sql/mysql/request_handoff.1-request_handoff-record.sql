-- statements.request_handoff().record, sent by request_handoff(session_id, platform)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 2.
-- Parameters the statement carries: :param_1 = 'requested for '.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'pending', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt, concat(:param_1, :platform) AS anon_3
FROM sessions
WHERE sessions.id = :session_id AND (sessions.handoff_state IS NULL
    OR sessions.handoff_state = 'completed' OR sessions.handoff_state = 'failed')
FOR UPDATE;
