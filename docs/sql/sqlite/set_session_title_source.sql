-- statements.set_title_source(), sent by set_session_title_source(session_id, source)
-- SQLite (pysqlite): the operation's one statement.

UPDATE sessions
SET title_source=:title_source
WHERE sessions.id = :session_id AND sessions.title IS NOT NULL;
