-- statements.pin_guard(), sent by set_session_pinned(session_id, pinned)
-- PostgreSQL (psycopg): step 3 of 4, when pinning.

SELECT sessions.hidden, sessions.title
FROM sessions
WHERE sessions.id = :session_id::VARCHAR;
