-- statements.session_prompt_and_config(), sent by update_session_model(session_id, model, provider)
-- SQLite (pysqlite): step 1 of 3.

SELECT sessions.system_prompt_hash, sessions.model_config
FROM sessions
WHERE sessions.id = :session_id;
