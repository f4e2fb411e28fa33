-- statements.set_title_source(), sent by set_session_title_source(session_id, source)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

UPDATE sessions
SET title_source=:title_source
WHERE sessions.id = :session_id AND sessions.title IS NOT NULL;
