-- statements.set_title(), sent by set_auto_title(session_id, title, source=...)
-- SQLite (pysqlite): step 3 of 3, only if the title is still what was read.

UPDATE sessions
SET title=:title, title_source=:title_source
WHERE sessions.id = :session_id AND sessions.title IS :seen_title
    AND sessions.title_source IS :seen_source;
