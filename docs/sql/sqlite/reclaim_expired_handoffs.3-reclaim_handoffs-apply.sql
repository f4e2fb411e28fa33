-- statements.reclaim_handoffs(scope=ReclaimScope.EXPIRED).apply, sent by reclaim_expired_handoffs(error)
-- SQLite (pysqlite): step 3 of 3.
-- Parameters the statement carries: :handoff_lease_expires_at = NULL.

UPDATE sessions
SET handoff_state='failed', handoff_error=:error, handoff_finished_at=:now,
    handoff_lease_expires_at=:handoff_lease_expires_at
WHERE sessions.handoff_state = 'running' AND sessions.handoff_lease_expires_at < :now;
