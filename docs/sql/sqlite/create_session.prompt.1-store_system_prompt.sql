-- statements.store_system_prompt(dialect_name='sqlite'), sent by create_session(session_id, source, system_prompt=...)
-- SQLite (pysqlite): step 1 of 3.

INSERT INTO system_prompts (hash, prompt)
VALUES (:hash, :prompt)
ON CONFLICT (hash) DO NOTHING;
