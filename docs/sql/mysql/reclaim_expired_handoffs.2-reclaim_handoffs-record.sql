-- statements.reclaim_handoffs(scope=ReclaimScope.EXPIRED).record, sent by reclaim_expired_handoffs(error)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 3.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'failed', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt, :error AS anon_3
FROM sessions
WHERE sessions.handoff_state = 'running' AND sessions.handoff_lease_expires_at < :now
FOR UPDATE;
