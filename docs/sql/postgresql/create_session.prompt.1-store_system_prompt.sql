-- statements.store_system_prompt(dialect_name='postgresql'), sent by create_session(session_id, source, system_prompt=...)
-- PostgreSQL (psycopg): step 1 of 3.

INSERT INTO system_prompts (hash, prompt)
VALUES (:hash::VARCHAR, :prompt::VARCHAR)
ON CONFLICT (hash) DO NOTHING;
