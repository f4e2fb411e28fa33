-- statements.title_holder(), sent by set_session_title(session_id, 'Bot Chat'), the title held by an archived session, the claimant or the holder hidden
-- PostgreSQL (psycopg): step 2 of 5, when a title is given: another session holding it.

SELECT sessions.id, sessions.archived, sessions.hidden
FROM sessions
WHERE sessions.title = :title::VARCHAR AND sessions.id != :session_id::VARCHAR;
