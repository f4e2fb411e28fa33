-- statements.claim_handoff(returning=True, audit_returning=False).single, sent by claim_handoff(session_id)
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :handoff_attempt_1 = 1.

WITH locked AS (
  SELECT sessions.id AS id, sessions.handoff_state AS from_state
  FROM sessions
  WHERE sessions.id = :session_id::VARCHAR AND sessions.handoff_state = 'pending'
  ORDER BY sessions.id
  FOR UPDATE SKIP LOCKED
),
moved AS (
  UPDATE sessions
  SET handoff_state='running', handoff_claimed_at=:now, handoff_owner=:owner::VARCHAR,
      handoff_lease_expires_at=:lease_expires_at,
      handoff_attempt=(sessions.handoff_attempt + :handoff_attempt_1::INTEGER)
  FROM locked
  WHERE sessions.id = locked.id
  RETURNING sessions.id, sessions.handoff_attempt, sessions.handoff_platform, locked.from_state
),
recorded AS (
  INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
  SELECT moved.id AS id, moved.from_state AS from_state, 'running', :now AS anon_1,
      :actor::VARCHAR AS anon_2, moved.handoff_attempt AS handoff_attempt, NULL AS anon_3
  FROM moved
)
SELECT moved.id, moved.handoff_attempt
FROM moved;
