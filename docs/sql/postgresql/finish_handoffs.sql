-- statements.finish_claims(fenced=True, release=False), sent by finish_handoffs(outcomes), after the store claimed them
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :param_1 = NULL.

WITH locked AS (
  SELECT sessions.id AS id, anon_4.error AS error
  FROM sessions, unnest(:ids::VARCHAR[], :attempts::INTEGER[], :errors::TEXT[]) AS anon_4(id,
      attempt, error)
  WHERE sessions.id = anon_4.id AND sessions.handoff_state = 'running'
      AND sessions.handoff_owner = :owner::VARCHAR AND (anon_4.attempt IS NULL
          OR sessions.handoff_attempt = anon_4.attempt)
  ORDER BY sessions.id
  FOR UPDATE OF sessions
),
moved AS (
  UPDATE sessions
  SET handoff_state=CASE WHEN (locked.error IS NULL) THEN 'completed' ELSE 'failed' END,
      handoff_error=locked.error, handoff_finished_at=:now, handoff_lease_expires_at=:param_1
  FROM locked
  WHERE sessions.id = locked.id
  RETURNING sessions.id, sessions.handoff_attempt, locked.error
),
recorded AS (
  INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
  SELECT moved.id AS id, 'running',
      CASE WHEN (moved.error IS NULL) THEN 'completed' ELSE 'failed' END AS anon_1, :now AS anon_2,
      :actor::VARCHAR AS anon_3, moved.handoff_attempt AS handoff_attempt, moved.error AS error
  FROM moved
)
SELECT moved.id
FROM moved;
