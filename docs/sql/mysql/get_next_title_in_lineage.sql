-- statements.lineage(), sent by get_next_title_in_lineage(base_title)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT sessions.id, sessions.title, sessions.started_at
FROM sessions
WHERE sessions.title = :base OR sessions.title LIKE :pattern ESCAPE '/'
ORDER BY sessions.started_at DESC, sessions.id DESC;
