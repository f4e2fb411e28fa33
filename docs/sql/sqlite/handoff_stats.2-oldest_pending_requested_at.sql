-- statements.oldest_pending_requested_at(), sent by handoff_stats()
-- SQLite (pysqlite): step 2 of 5.

SELECT min(coalesce(sessions.handoff_requested_at, sessions.started_at)) AS requested_at
FROM sessions
WHERE sessions.handoff_state = 'pending';
