-- statements.pin_guard(), sent by set_session_pinned(session_id, pinned)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 4, when pinning.

SELECT sessions.hidden, sessions.title
FROM sessions
WHERE sessions.id = :session_id;
