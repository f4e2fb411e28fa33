-- statements.pin_guard(), sent by set_session_pinned(session_id, pinned)
-- SQLite (pysqlite): step 3 of 4, when pinning.

SELECT sessions.hidden, sessions.title
FROM sessions
WHERE sessions.id = :session_id;
