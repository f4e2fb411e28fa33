-- statements.set_lineage_flag(column='last_read_at'), sent by set_session_read(session_id, read)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2, once per session of the lineage.

UPDATE sessions
SET last_read_at=:value
WHERE sessions.id = :session_id;
