-- statements.complete_handoff(fence=Fence.CLAIM).apply, sent by complete_handoffs(session_ids), after the store claimed them
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2, once per row.
-- Parameters the statement carries: :handoff_error = NULL, :handoff_lease_expires_at = NULL.

UPDATE sessions
SET handoff_state='completed', handoff_error=:handoff_error, handoff_finished_at=:now,
    handoff_lease_expires_at=:handoff_lease_expires_at
WHERE sessions.id = :session_id AND sessions.handoff_state = 'running'
    AND sessions.handoff_owner = :owner AND sessions.handoff_attempt = :attempt;
