-- statements.store_system_prompt(dialect_name='postgresql'), sent by import_sessions(sessions)
-- PostgreSQL (psycopg): step 3 of 8, once per new record with a prompt.

INSERT INTO system_prompts (hash, prompt)
VALUES (:hash::VARCHAR, :prompt::VARCHAR)
ON CONFLICT (hash) DO NOTHING;
