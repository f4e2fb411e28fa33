-- statements.claim_handoff(returning=False).record, sent by claim_next_handoffs(limit, exclude=ids)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 5, once per row claimed.
-- Parameters the statement carries: :handoff_attempt_1 = 1.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'running', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt + :handoff_attempt_1 AS anon_3, NULL AS anon_4
FROM sessions
WHERE sessions.id = :session_id AND sessions.handoff_state = 'pending'
FOR UPDATE SKIP LOCKED;
