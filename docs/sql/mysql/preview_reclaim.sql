-- statements.reclaimable(scope=ReclaimScope.STALE, lock=False), sent by preview_reclaim('stale')
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT sessions.id, sessions.handoff_owner AS owner, sessions.handoff_claimed_at AS claimed_at,
    sessions.handoff_lease_expires_at AS lease_expires_at, sessions.handoff_attempt AS attempt
FROM sessions
WHERE sessions.handoff_state = 'running' AND (sessions.handoff_lease_expires_at IS NULL
    OR sessions.handoff_lease_expires_at < :now OR sessions.handoff_owner = :owner)
ORDER BY sessions.id;
