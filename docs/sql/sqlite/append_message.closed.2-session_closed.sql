-- statements.session_closed(), sent by append_message(session_id, role, content), when compression closed the session
-- SQLite (pysqlite): step 2 of 2, nothing was appended: is there no such session, or did compression close it?.

SELECT CASE WHEN (sessions.ended_at IS NOT NULL AND sessions.end_reason = 'compression') THEN 1 ELSE 0 END AS closed
FROM sessions
WHERE sessions.id = :session_id;
