-- statements.set_lineage_flag(column='pinned'), sent by set_session_pinned(session_id, pinned)
-- SQLite (pysqlite): step 2 of 4, once per session of the lineage.

UPDATE sessions
SET pinned=:value
WHERE sessions.id = :session_id;
