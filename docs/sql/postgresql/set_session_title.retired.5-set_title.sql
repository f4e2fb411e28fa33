-- statements.set_title(), sent by set_session_title(session_id, 'Bot Chat'), the title held by an archived session, the claimant or the holder hidden
-- PostgreSQL (psycopg): step 5 of 5, only if the title is still what was read.

UPDATE sessions
SET title=:title::VARCHAR, title_source=:title_source::VARCHAR
WHERE sessions.id = :session_id::VARCHAR AND sessions.title IS NOT DISTINCT
FROM :seen_title::VARCHAR AND sessions.title_source IS NOT DISTINCT
FROM :seen_source::VARCHAR;
