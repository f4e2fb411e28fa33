-- statements.reclaimable(scope=ReclaimScope.STALE, lock=True), sent by reclaim_stale_running_handoffs(error)
-- SQLite (pysqlite): step 1 of 3.

SELECT sessions.id, sessions.handoff_owner AS owner, sessions.handoff_claimed_at AS claimed_at,
    sessions.handoff_lease_expires_at AS lease_expires_at, sessions.handoff_attempt AS attempt
FROM sessions
WHERE sessions.handoff_state = 'running' AND (sessions.handoff_lease_expires_at IS NULL
    OR sessions.handoff_lease_expires_at < :now OR sessions.handoff_owner = :owner)
ORDER BY sessions.id;
