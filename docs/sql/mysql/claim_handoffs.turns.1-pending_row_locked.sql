-- statements.pending_row_locked(), sent by claim_handoffs(session_ids, turn_holders=holders)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 8, once per session given.

SELECT sessions.id, sessions.started_at
FROM sessions
WHERE sessions.id = :session_id AND sessions.handoff_state = 'pending'
FOR UPDATE SKIP LOCKED;
