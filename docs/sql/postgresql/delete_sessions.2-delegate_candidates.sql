-- statements.delegate_candidates(), sent by delete_sessions(session_ids)
-- PostgreSQL (psycopg): step 2 of 10, when a session given exists.

SELECT sessions.id, sessions.parent_session_id, sessions.model_config
FROM sessions
WHERE sessions.model_config LIKE '%/_delegate/_from%' ESCAPE '/';
