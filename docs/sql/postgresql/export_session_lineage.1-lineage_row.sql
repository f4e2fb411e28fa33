-- statements.lineage_row(), sent by export_session_lineage(session_id)
-- PostgreSQL (psycopg): step 1 of 4, once, and once more per step up to the lineage's root.

SELECT sessions.id, sessions.parent_session_id, sessions.source, sessions.model_config,
    sessions.end_reason
FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
