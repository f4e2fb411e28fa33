-- statements.session_exists(), sent by import_sessions(sessions)
-- SQLite (pysqlite): step 1 of 8, once per record: an id already stored is skipped.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id;
