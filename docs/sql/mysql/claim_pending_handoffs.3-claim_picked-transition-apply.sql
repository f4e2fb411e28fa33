-- statements.claim_picked(by_platform=False).transition.apply, sent by claim_pending_handoffs(limit)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 4.
-- Parameters the statement carries: :handoff_attempt_1 = 1.
-- :ids is a list: one parameter per item.

UPDATE sessions FORCE INDEX (PRIMARY)
SET handoff_state='running', handoff_claimed_at=:now, handoff_owner=:owner,
    handoff_lease_expires_at=:lease_expires_at,
    handoff_attempt=(sessions.handoff_attempt + :handoff_attempt_1)
WHERE sessions.id IN (:ids) AND sessions.handoff_state = 'pending';
