-- statements.session_exists(), sent by resolve_session_id(session_id_or_prefix)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 2.

SELECT sessions.id
FROM sessions
WHERE sessions.id = :session_id;
