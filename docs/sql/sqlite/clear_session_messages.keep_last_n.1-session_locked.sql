-- statements.session_locked(), sent by clear_session_messages(session_id, keep_last_n=n)
-- SQLite (pysqlite): step 1 of 6, the session must exist.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id;
