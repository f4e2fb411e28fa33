-- statements.prune_events(), sent by prune_handoff_events(older_than_seconds)
-- SQLite (pysqlite): the operation's one statement.

DELETE FROM handoff_events
WHERE handoff_events.at < :before;
