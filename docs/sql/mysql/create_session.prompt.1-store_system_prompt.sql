-- statements.store_system_prompt(dialect_name='mysql'), sent by create_session(session_id, source, system_prompt=...)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 4.

INSERT INTO system_prompts (hash, prompt)
SELECT :hash AS anon_1, :prompt AS anon_2
FROM DUAL
WHERE NOT (EXISTS (SELECT * FROM system_prompts WHERE system_prompts.hash = :hash));
