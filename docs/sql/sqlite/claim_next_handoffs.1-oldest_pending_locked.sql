-- statements.oldest_pending_locked(), sent by claim_next_handoffs(limit, exclude=ids)
-- SQLite (pysqlite): step 1 of 5.
-- Parameters the statement carries: :param_1 = 0.

SELECT sessions.id
FROM sessions
WHERE sessions.handoff_state = 'pending'
ORDER BY sessions.started_at, sessions.id
LIMIT :limit
OFFSET :param_1;
