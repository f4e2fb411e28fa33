-- statements.release_title(with_source=True), sent by set_session_title(session_id, 'Bot Chat'), the title held by an archived session, the claimant or the holder hidden
-- PostgreSQL (psycopg): step 4 of 5.

UPDATE sessions
SET title=NULL, title_source=NULL
WHERE sessions.id = :holder_id::VARCHAR;
