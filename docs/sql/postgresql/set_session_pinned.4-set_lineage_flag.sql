-- statements.set_lineage_flag(column='hidden'), sent by set_session_pinned(session_id, pinned)
-- PostgreSQL (psycopg): step 4 of 4, when pinning anything but the hidden canonical Bot Chat: once per session of the lineage.

UPDATE sessions
SET hidden=:value::INTEGER
WHERE sessions.id = :session_id::VARCHAR;
