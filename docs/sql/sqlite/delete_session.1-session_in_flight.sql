-- statements.session_in_flight(), sent by delete_session(session_id)
-- SQLite (pysqlite): step 1 of 10, once for the session, then once per delegate run.

SELECT sessions.id, sessions.handoff_state
FROM sessions
WHERE sessions.id = :session_id;
