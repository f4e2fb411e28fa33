-- statements.reclaim_handoffs(scope=ReclaimScope.ALL).apply, sent by reclaim_running_handoffs(error)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 3.
-- Parameters the statement carries: :handoff_lease_expires_at = NULL.

UPDATE sessions
SET handoff_state='failed', handoff_error=:error, handoff_finished_at=:now,
    handoff_lease_expires_at=:handoff_lease_expires_at
WHERE sessions.handoff_state = 'running';
