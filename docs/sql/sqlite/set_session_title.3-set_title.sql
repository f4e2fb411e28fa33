-- statements.set_title(), sent by set_session_title(session_id, title)
-- SQLite (pysqlite): step 3 of 3.

UPDATE sessions
SET title=:title, title_source=:title_source
WHERE sessions.id = :session_id;
