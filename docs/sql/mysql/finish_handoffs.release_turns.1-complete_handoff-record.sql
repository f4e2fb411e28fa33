-- statements.complete_handoff(fence=Fence.CLAIM).record, sent by finish_handoffs(outcomes, release_turns=holders), after the store claimed them
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 6, once per row.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'completed', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt, NULL AS anon_3
FROM sessions
WHERE sessions.id = :session_id AND sessions.handoff_state = 'running'
    AND sessions.handoff_owner = :owner AND sessions.handoff_attempt = :attempt
FOR UPDATE;
