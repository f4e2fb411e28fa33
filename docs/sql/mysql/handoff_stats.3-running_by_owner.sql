-- statements.running_by_owner(), sent by handoff_stats()
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 5.
-- Parameters the statement carries: :param_1 = 1, :param_2 = 1.

SELECT sessions.handoff_owner AS owner, count(*) AS running,
    count(CASE WHEN (sessions.handoff_lease_expires_at >= :now) THEN :param_1 END) AS live_leases,
    count(CASE WHEN (sessions.handoff_lease_expires_at < :now) THEN :param_2 END) AS expired_leases
FROM sessions
WHERE sessions.handoff_state = 'running'
GROUP BY sessions.handoff_owner
ORDER BY sessions.handoff_owner;
