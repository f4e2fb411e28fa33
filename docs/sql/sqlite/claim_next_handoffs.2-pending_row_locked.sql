-- statements.pending_row_locked(), sent by claim_next_handoffs(limit, exclude=ids)
-- SQLite (pysqlite): step 2 of 5, once per session given.

SELECT sessions.id, sessions.started_at
FROM sessions
WHERE sessions.id = :session_id AND sessions.handoff_state = 'pending';
