-- statements.forget_system_prompt(), sent by update_session_model(session_id, model, provider)
-- SQLite (pysqlite): step 3 of 3, when the session pointed at another prompt.

DELETE FROM system_prompts
WHERE system_prompts.hash = :old_hash AND NOT (EXISTS (
  SELECT *
  FROM sessions
  WHERE sessions.system_prompt_hash = :old_hash OR sessions.tool_names = :old_hash
));
