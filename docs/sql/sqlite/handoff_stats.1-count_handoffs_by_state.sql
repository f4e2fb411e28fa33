-- statements.count_handoffs_by_state(), sent by handoff_stats()
-- SQLite (pysqlite): step 1 of 5.

SELECT sessions.handoff_state AS state, count(*) AS count
FROM sessions
WHERE sessions.handoff_state IS NOT NULL
GROUP BY sessions.handoff_state;
