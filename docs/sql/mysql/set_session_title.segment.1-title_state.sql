-- statements.title_state(), sent by set_session_title(session_id, title), the title held by an earlier compression segment of the session
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 5, the session must exist (and its title may change).

SELECT sessions.title, sessions.title_source, sessions.hidden
FROM sessions
WHERE sessions.id = :session_id;
