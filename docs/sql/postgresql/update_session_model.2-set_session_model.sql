-- statements.set_session_model(), sent by update_session_model(session_id, model, provider)
-- PostgreSQL (psycopg): step 2 of 3, when the session exists.
-- Parameters the statement carries: :system_prompt = NULL, :system_prompt_hash = NULL.

UPDATE sessions
SET model=:model::VARCHAR, model_config=:model_config::VARCHAR,
    system_prompt=:system_prompt::VARCHAR, system_prompt_hash=:system_prompt_hash::VARCHAR
WHERE sessions.id = :session_id::VARCHAR;
