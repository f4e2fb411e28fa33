-- statements.request_handoff(retry=True).apply, sent by retry_handoff(session_id, platform=None)
-- SQLite (pysqlite): step 2 of 2.
-- Parameters the statement carries: :handoff_error = NULL, :handoff_claimed_at = NULL, :handoff_finished_at = NULL, :handoff_owner = NULL, :handoff_lease_expires_at = NULL.

UPDATE sessions
SET handoff_state='pending', handoff_platform=coalesce(:platform, sessions.handoff_platform),
    handoff_error=:handoff_error, handoff_requested_at=:now, handoff_claimed_at=:handoff_claimed_at,
    handoff_finished_at=:handoff_finished_at, handoff_owner=:handoff_owner,
    handoff_lease_expires_at=:handoff_lease_expires_at
WHERE sessions.id = :session_id AND sessions.handoff_state = 'failed';
