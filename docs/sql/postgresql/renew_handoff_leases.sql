-- statements.renew_leases(), sent by renew_handoff_leases(session_ids)
-- PostgreSQL (psycopg): the operation's one statement.

WITH locked AS (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id = ANY (:ids::VARCHAR[]) AND sessions.handoff_state = 'running'
      AND sessions.handoff_owner = :owner::VARCHAR
  ORDER BY sessions.id
  FOR UPDATE
),
renewed AS (
  UPDATE sessions
  SET handoff_lease_expires_at=:lease_expires_at
  FROM locked
  WHERE sessions.id = locked.id
  RETURNING sessions.id
)
SELECT renewed.id
FROM renewed;
