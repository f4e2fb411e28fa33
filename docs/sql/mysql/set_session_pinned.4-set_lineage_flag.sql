-- statements.set_lineage_flag(column='hidden'), sent by set_session_pinned(session_id, pinned)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 4 of 4, when pinning anything but the hidden canonical Bot Chat: once per session of the lineage.

UPDATE sessions
SET hidden=:value
WHERE sessions.id = :session_id;
