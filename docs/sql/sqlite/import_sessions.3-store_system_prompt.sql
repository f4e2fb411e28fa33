-- statements.store_system_prompt(dialect_name='sqlite'), sent by import_sessions(sessions)
-- SQLite (pysqlite): step 3 of 8, once per new record with a prompt.

INSERT INTO system_prompts (hash, prompt)
VALUES (:hash, :prompt)
ON CONFLICT (hash) DO NOTHING;
