-- statements.store_system_prompt(dialect_name='sqlite'), sent by update_system_prompt(session_id, system_prompt)
-- SQLite (pysqlite): step 2 of 4, when the session exists.

INSERT INTO system_prompts (hash, prompt)
VALUES (:hash, :prompt)
ON CONFLICT (hash) DO NOTHING;
