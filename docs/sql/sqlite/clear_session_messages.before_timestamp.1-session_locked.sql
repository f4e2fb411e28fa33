-- statements.session_locked(), sent by clear_session_messages(session_id, before_timestamp=when)
-- SQLite (pysqlite): step 1 of 5, the session must exist.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id;
