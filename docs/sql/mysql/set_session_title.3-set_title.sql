-- statements.set_title(), sent by set_session_title(session_id, title)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 3, only if the title is still what was read.

UPDATE sessions
SET title=:title, title_source=:title_source
WHERE sessions.id = :session_id AND sessions.title <=> :seen_title
    AND sessions.title_source <=> :seen_source;
