-- statements.reclaim_handoffs(scope=ReclaimScope.ALL).single, sent by reclaim_running_handoffs(error)
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :param_1 = NULL.

WITH locked AS (
  SELECT sessions.id AS id, sessions.handoff_state AS from_state
  FROM sessions
  WHERE sessions.handoff_state = 'running'
  ORDER BY sessions.id
  FOR UPDATE
),
moved AS (
  UPDATE sessions
  SET handoff_state='failed', handoff_error=:error::VARCHAR, handoff_finished_at=:now,
      handoff_lease_expires_at=:param_1
  FROM locked
  WHERE sessions.id = locked.id
  RETURNING sessions.id, sessions.handoff_attempt, sessions.handoff_platform, locked.from_state
),
recorded AS (
  INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
  SELECT moved.id AS id, moved.from_state AS from_state, 'failed', :now AS anon_1,
      :actor::VARCHAR AS anon_2, moved.handoff_attempt AS handoff_attempt, :error::VARCHAR AS anon_3
  FROM moved
)
SELECT moved.id, moved.handoff_attempt
FROM moved;
