-- statements.count_failures_since(), sent by handoff_stats()
-- SQLite (pysqlite): step 4 of 5.

SELECT count(*) AS count
FROM handoff_events
WHERE handoff_events.to_state = 'failed' AND handoff_events.at >= :since;
