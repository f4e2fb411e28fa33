-- statements.claim_pending_transition(by_platform=True).record, sent by claim_pending_handoffs(limit, platform=platform)
-- SQLite (pysqlite): step 1 of 2.
-- Parameters the statement carries: :handoff_attempt_1 = 1, :param_1 = 0.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'running', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt + :handoff_attempt_1 AS anon_3, NULL AS anon_4
FROM sessions
WHERE sessions.rowid IN (
  SELECT sessions.rowid
  FROM sessions
  WHERE sessions.handoff_state = 'pending' AND sessions.handoff_platform = :platform
  ORDER BY sessions.started_at, sessions.id
  LIMIT :limit
  OFFSET :param_1
);
