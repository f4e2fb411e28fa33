-- statements.lineage(), sent by resolve_session_by_title(title)
-- SQLite (pysqlite): the operation's one statement.

SELECT sessions.id, sessions.title, sessions.started_at
FROM sessions
WHERE sessions.title = :base OR sessions.title LIKE :pattern ESCAPE '/'
ORDER BY sessions.started_at DESC, sessions.id DESC;
