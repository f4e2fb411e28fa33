-- statements.title_state(), sent by set_session_title(session_id, 'Bot Chat'), the title held by an archived session, the claimant or the holder hidden
-- PostgreSQL (psycopg): step 1 of 5, the session must exist (and its title may change).

SELECT sessions.title, sessions.title_source, sessions.hidden
FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
