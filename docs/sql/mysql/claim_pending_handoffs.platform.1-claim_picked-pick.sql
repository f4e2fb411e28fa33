-- statements.claim_picked(by_platform=True).pick, sent by claim_pending_handoffs(limit, platform=platform)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 4.

SELECT sessions.id
FROM sessions
WHERE sessions.handoff_state = 'pending' AND sessions.handoff_platform = :platform
ORDER BY sessions.started_at, sessions.id
LIMIT :limit
FOR UPDATE SKIP LOCKED;
