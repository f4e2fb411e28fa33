-- statements.set_lineage_flag(column='archived'), sent by set_session_archived(session_id, archived)
-- SQLite (pysqlite): step 2 of 2, once per session of the lineage.

UPDATE sessions
SET archived=:value
WHERE sessions.id = :session_id;
