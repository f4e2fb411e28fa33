-- statements.store_system_prompt(dialect_name='postgresql'), sent by update_system_prompt(session_id, system_prompt)
-- PostgreSQL (psycopg): step 2 of 4, when the session exists.

INSERT INTO system_prompts (hash, prompt)
VALUES (:hash::VARCHAR, :prompt::VARCHAR)
ON CONFLICT (hash) DO NOTHING;
