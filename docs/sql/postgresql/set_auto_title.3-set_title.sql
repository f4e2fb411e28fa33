-- statements.set_title(), sent by set_auto_title(session_id, title, source=...)
-- PostgreSQL (psycopg): step 3 of 3, only if the title is still what was read.

UPDATE sessions
SET title=:title::VARCHAR, title_source=:title_source::VARCHAR
WHERE sessions.id = :session_id::VARCHAR AND sessions.title IS NOT DISTINCT
FROM :seen_title::VARCHAR AND sessions.title_source IS NOT DISTINCT
FROM :seen_source::VARCHAR;
