-- statements.claim_picked(by_platform=False).pick, sent by claim_pending_handoffs(limit)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 4.

SELECT sessions.id
FROM sessions
WHERE sessions.handoff_state = 'pending'
ORDER BY sessions.started_at, sessions.id
LIMIT :limit
FOR UPDATE SKIP LOCKED;
