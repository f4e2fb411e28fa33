-- statements.claim_picked(by_platform=False).transition.record, sent by claim_pending_handoffs(limit)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 4.
-- Parameters the statement carries: :handoff_attempt_1 = 1.
-- :ids is a list: one parameter per item.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'running', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt + :handoff_attempt_1 AS anon_3, NULL AS anon_4
FROM sessions FORCE INDEX (PRIMARY)
WHERE sessions.id IN (:ids) AND sessions.handoff_state = 'pending'
FOR UPDATE;
