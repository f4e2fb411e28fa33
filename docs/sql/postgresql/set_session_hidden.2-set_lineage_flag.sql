-- statements.set_lineage_flag(column='hidden'), sent by set_session_hidden(session_id, hidden)
-- PostgreSQL (psycopg): step 2 of 2, once per session of the lineage.

UPDATE sessions
SET hidden=:value::INTEGER
WHERE sessions.id = :session_id::VARCHAR;
