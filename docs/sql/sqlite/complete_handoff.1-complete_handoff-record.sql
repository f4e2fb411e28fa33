-- statements.complete_handoff(fence=Fence.CLAIM).record, sent by complete_handoff(session_id), after the store claimed it
-- SQLite (pysqlite): step 1 of 2.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, sessions.handoff_state, 'completed', :now AS anon_1, :actor AS anon_2,
    sessions.handoff_attempt, NULL AS anon_3
FROM sessions
WHERE sessions.id = :session_id AND sessions.handoff_state = 'running'
    AND sessions.handoff_owner = :owner AND sessions.handoff_attempt = :attempt;
