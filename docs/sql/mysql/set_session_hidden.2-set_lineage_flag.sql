-- statements.set_lineage_flag(column='hidden'), sent by set_session_hidden(session_id, hidden)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2, once per session of the lineage.

UPDATE sessions
SET hidden=:value
WHERE sessions.id = :session_id;
