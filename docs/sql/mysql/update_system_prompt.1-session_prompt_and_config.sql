-- statements.session_prompt_and_config(), sent by update_system_prompt(session_id, system_prompt)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 4.

SELECT sessions.system_prompt_hash, sessions.model_config
FROM sessions
WHERE sessions.id = :session_id
FOR UPDATE;
