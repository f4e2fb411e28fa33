-- statements.set_session_model(), sent by update_session_model(session_id, model, provider)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 3, when the session exists.
-- Parameters the statement carries: :system_prompt = NULL, :system_prompt_hash = NULL.

UPDATE sessions
SET model=:model, model_config=:model_config, system_prompt=:system_prompt,
    system_prompt_hash=:system_prompt_hash
WHERE sessions.id = :session_id;
