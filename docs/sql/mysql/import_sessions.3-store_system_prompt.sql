-- statements.store_system_prompt(dialect_name='mysql'), sent by import_sessions(sessions)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 8, once per new record with a prompt.

INSERT INTO system_prompts (hash, prompt)
SELECT :hash AS anon_1, :prompt AS anon_2
FROM DUAL
WHERE NOT (EXISTS (SELECT * FROM system_prompts WHERE system_prompts.hash = :hash));
