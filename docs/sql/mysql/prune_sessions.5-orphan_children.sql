-- statements.orphan_children(), sent by prune_sessions(older_than_days)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 5 of 10, once per session deleted.
-- Parameters the statement carries: :parent_session_id = NULL.

UPDATE sessions
SET parent_session_id=:parent_session_id
WHERE sessions.parent_session_id = :session_id;
