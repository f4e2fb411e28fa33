-- statements.title_state(), sent by set_session_title(session_id, title)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 3, the session must exist (and its title may change).

SELECT sessions.title, sessions.title_source, sessions.hidden
FROM sessions
WHERE sessions.id = :session_id;
