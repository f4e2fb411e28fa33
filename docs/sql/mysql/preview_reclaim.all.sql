-- statements.reclaimable(scope=ReclaimScope.ALL, lock=False), sent by preview_reclaim('all')
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT sessions.id, sessions.handoff_owner AS owner, sessions.handoff_claimed_at AS claimed_at,
    sessions.handoff_lease_expires_at AS lease_expires_at, sessions.handoff_attempt AS attempt
FROM sessions
WHERE sessions.handoff_state = 'running'
ORDER BY sessions.id;
