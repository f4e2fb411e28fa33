-- statements.request_handoff().single, sent by request_handoff(session_id, platform)
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :param_2 = NULL, :param_3 = NULL, :param_4 = NULL, :param_5 = NULL, :param_6 = NULL, :param_1 = 'requested for ', :pg_notify_1 = 'hermes_state_handoffs'.

WITH locked AS (
  SELECT sessions.id AS id, sessions.handoff_state AS from_state
  FROM sessions
  WHERE sessions.id = :session_id::VARCHAR AND (sessions.handoff_state IS NULL
      OR sessions.handoff_state = 'completed' OR sessions.handoff_state = 'failed')
  ORDER BY sessions.id
  FOR UPDATE
),
moved AS (
  UPDATE sessions
  SET handoff_state='pending', handoff_platform=:platform::VARCHAR, handoff_error=:param_2::VARCHAR,
      handoff_requested_at=:now, handoff_claimed_at=:param_3, handoff_finished_at=:param_4,
      handoff_owner=:param_5::VARCHAR, handoff_lease_expires_at=:param_6
  FROM locked
  WHERE sessions.id = locked.id
  RETURNING sessions.id, sessions.handoff_attempt, sessions.handoff_platform, locked.from_state
),
recorded AS (
  INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
  SELECT moved.id AS id, moved.from_state AS from_state, 'pending', :now AS anon_1,
      :actor::VARCHAR AS anon_2, moved.handoff_attempt AS handoff_attempt, :param_1::VARCHAR
      || :platform::VARCHAR AS anon_3
  FROM moved
)
SELECT moved.id, moved.handoff_attempt, pg_notify(:pg_notify_1::VARCHAR, moved.id) AS notified
FROM moved;
