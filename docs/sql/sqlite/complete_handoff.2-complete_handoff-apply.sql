-- statements.complete_handoff(fence=Fence.CLAIM).apply, sent by complete_handoff(session_id), after the store claimed it
-- SQLite (pysqlite): step 2 of 2.
-- Parameters the statement carries: :handoff_error = NULL, :handoff_lease_expires_at = NULL.

UPDATE sessions
SET handoff_state='completed', handoff_error=:handoff_error, handoff_finished_at=:now,
    handoff_lease_expires_at=:handoff_lease_expires_at
WHERE sessions.id = :session_id AND sessions.handoff_state = 'running'
    AND sessions.handoff_owner = :owner AND sessions.handoff_attempt = :attempt;
