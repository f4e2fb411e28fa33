-- statements.get_title(), sent by set_session_title(session_id, title)
-- SQLite (pysqlite): step 1 of 3, the session must exist.

SELECT sessions.title
FROM sessions
WHERE sessions.id = :session_id;
