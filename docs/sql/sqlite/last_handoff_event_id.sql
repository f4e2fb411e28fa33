-- statements.last_handoff_event_id(), sent by last_handoff_event_id()
-- SQLite (pysqlite): the operation's one statement.

SELECT max(handoff_events.id) AS last
FROM handoff_events;
