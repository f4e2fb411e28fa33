-- statements.request_handoff(retry=True).record, sent by retry_handoff(session_id, platform=None)
-- SQLite (pysqlite): step 1 of 2.
-- Parameters the statement carries: :param_1 = 'retry for '.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'pending', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt, :param_1 || coalesce(:platform, sessions.handoff_platform) AS anon_3
FROM sessions
WHERE sessions.id = :session_id AND sessions.handoff_state = 'failed';
