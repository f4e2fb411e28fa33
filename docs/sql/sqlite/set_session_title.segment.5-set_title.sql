-- statements.set_title(), sent by set_session_title(session_id, title), the title held by an earlier compression segment of the session
-- SQLite (pysqlite): step 5 of 5, only if the title is still what was read.

UPDATE sessions
SET title=:title, title_source=:title_source
WHERE sessions.id = :session_id AND sessions.title IS :seen_title
    AND sessions.title_source IS :seen_source;
