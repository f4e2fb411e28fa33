-- statements.ids_with_prefix(ranged=False), sent by resolve_session_id(session_id_or_prefix)
-- PostgreSQL (psycopg): step 2 of 2, when no session has exactly this id.

SELECT sessions.id
FROM sessions
WHERE sessions.id LIKE :pattern::VARCHAR ESCAPE '/'
ORDER BY sessions.started_at DESC, sessions.id DESC
LIMIT :limit;
