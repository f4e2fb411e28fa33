-- statements.session_prompt_and_config(), sent by update_system_prompt(session_id, system_prompt)
-- PostgreSQL (psycopg): step 1 of 4.

SELECT sessions.system_prompt_hash, sessions.model_config
FROM sessions
WHERE sessions.id = :session_id::VARCHAR
FOR UPDATE;
