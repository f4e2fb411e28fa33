-- statements.pending_row_locked(), sent by claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 9, once per session given.

SELECT sessions.id, sessions.started_at
FROM sessions
WHERE sessions.id = :session_id AND sessions.handoff_state = 'pending'
FOR UPDATE SKIP LOCKED;
