-- statements.session_exists(), sent by resolve_session_id(session_id_or_prefix)
-- SQLite (pysqlite): step 1 of 2.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id;
