-- statements.claimed_attempt(), sent by claim_handoff(session_id)
-- MySQL 8.0 (PyMySQL): step 3 of 3.

SELECT sessions.handoff_attempt
FROM sessions
WHERE sessions.id = :session_id;
