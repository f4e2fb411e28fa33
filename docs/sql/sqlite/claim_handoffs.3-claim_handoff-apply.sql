-- statements.claim_handoff(returning=False).apply, sent by claim_handoffs(session_ids)
-- SQLite (pysqlite): step 3 of 4, once per row claimed.
-- Parameters the statement carries: :handoff_attempt_1 = 1.

UPDATE sessions
SET handoff_state='running', handoff_claimed_at=:now, handoff_owner=:owner,
    handoff_lease_expires_at=:lease_expires_at,
    handoff_attempt=(sessions.handoff_attempt + :handoff_attempt_1)
WHERE sessions.id = :session_id AND sessions.handoff_state = 'pending';
