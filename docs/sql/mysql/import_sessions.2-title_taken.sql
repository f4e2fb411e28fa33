-- statements.title_taken(), sent by import_sessions(sessions)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 8, once per new record with a title (titles are unique).
-- Parameters the statement carries: :param_1 = 1.

SELECT sessions.id
FROM sessions
WHERE sessions.title = :title
LIMIT :param_1;
