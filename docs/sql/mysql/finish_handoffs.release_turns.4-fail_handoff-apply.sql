-- statements.fail_handoff(from_states={HandoffState.RUNNING}, fence=Fence.CLAIM).apply, sent by finish_handoffs(outcomes, release_turns=holders), after the store claimed them
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 4 of 6, once per row.
-- Parameters the statement carries: :handoff_lease_expires_at = NULL.

UPDATE sessions
SET handoff_state='failed', handoff_error=:error, handoff_finished_at=:now,
    handoff_lease_expires_at=:handoff_lease_expires_at
WHERE sessions.id = :session_id AND sessions.handoff_state = 'running'
    AND sessions.handoff_owner = :owner AND sessions.handoff_attempt = :attempt;
