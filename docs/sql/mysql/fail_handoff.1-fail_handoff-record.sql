-- statements.fail_handoff(from_states={HandoffState.PENDING, HandoffState.RUNNING}, fence=Fence.CLAIM).record, sent by fail_handoff(session_id, error), after the store claimed it
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 2.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'failed', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt, :error AS anon_3
FROM sessions
WHERE sessions.id = :session_id AND (sessions.handoff_state = 'pending'
    OR sessions.handoff_state = 'running' AND sessions.handoff_owner = :owner
    AND sessions.handoff_attempt = :attempt)
FOR UPDATE;
