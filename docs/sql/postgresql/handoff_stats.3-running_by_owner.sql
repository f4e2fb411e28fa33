-- statements.running_by_owner(), sent by handoff_stats()
-- PostgreSQL (psycopg): step 3 of 5.
-- Parameters the statement carries: :param_1 = 1, :param_2 = 1.

SELECT sessions.handoff_owner AS owner, count(*) AS running,
    count(CASE WHEN (sessions.handoff_lease_expires_at >= :now) THEN :param_1::INTEGER END) AS live_leases,
    count(CASE WHEN (sessions.handoff_lease_expires_at < :now) THEN :param_2::INTEGER END) AS expired_leases
FROM sessions
WHERE sessions.handoff_state = 'running'
GROUP BY sessions.handoff_owner
ORDER BY sessions.handoff_owner;
