-- statements.set_system_prompt(), sent by update_system_prompt(session_id, system_prompt)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 4, when the session exists.
-- Parameters the statement carries: :system_prompt = NULL.

UPDATE sessions
SET system_prompt=:system_prompt, system_prompt_hash=:system_prompt_hash
WHERE sessions.id = :session_id;
