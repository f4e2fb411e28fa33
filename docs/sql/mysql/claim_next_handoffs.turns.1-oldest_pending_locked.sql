-- statements.oldest_pending_locked(), sent by claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 9.

SELECT sessions.id
FROM sessions
WHERE sessions.handoff_state = 'pending'
ORDER BY sessions.started_at, sessions.id
LIMIT :limit
FOR UPDATE SKIP LOCKED;
