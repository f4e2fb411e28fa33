-- statements.set_title(), sent by set_session_title(session_id, 'Bot Chat'), the title held by an archived session, the claimant or the holder hidden
-- SQLite (pysqlite): step 5 of 5, only if the title is still what was read.

UPDATE sessions
SET title=:title, title_source=:title_source
WHERE sessions.id = :session_id AND sessions.title IS :seen_title
    AND sessions.title_source IS :seen_source;
