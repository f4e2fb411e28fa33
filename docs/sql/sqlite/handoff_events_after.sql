-- statements.handoff_events_after(), sent by handoff_events_after(after, limit=limit)
-- SQLite (pysqlite): the operation's one statement.
-- Parameters the statement carries: :param_1 = 0.

SELECT handoff_events.id, handoff_events.session_id, handoff_events.from_state,
    handoff_events.to_state, handoff_events.at, handoff_events.actor, handoff_events.attempt,
    handoff_events.detail
FROM handoff_events
WHERE handoff_events.id > :after
ORDER BY handoff_events.id
LIMIT :limit
OFFSET :param_1;
