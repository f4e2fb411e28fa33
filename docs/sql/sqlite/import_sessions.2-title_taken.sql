-- statements.title_taken(), sent by import_sessions(sessions)
-- SQLite (pysqlite): step 2 of 8, once per new record with a title (titles are unique).
-- Parameters the statement carries: :param_1 = 1, :param_2 = 0.

SELECT sessions.id
FROM sessions
WHERE sessions.title = :title
LIMIT :param_1
OFFSET :param_2;
