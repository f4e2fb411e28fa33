-- statements.store_system_prompt(dialect_name='mysql'), sent by update_system_prompt(session_id, system_prompt)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 4, when the session exists.

INSERT INTO system_prompts (hash, prompt)
SELECT :hash AS anon_1, :prompt AS anon_2
FROM DUAL
WHERE NOT (EXISTS (SELECT * FROM system_prompts WHERE system_prompts.hash = :hash));
