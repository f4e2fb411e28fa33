-- statements.forget_system_prompt(), sent by create_session(session_id, source, system_prompt=...)
-- SQLite (pysqlite): step 3 of 3.

DELETE FROM system_prompts
WHERE system_prompts.hash = :old_hash AND NOT (EXISTS (
  SELECT *
  FROM sessions
  WHERE sessions.system_prompt_hash = :old_hash OR sessions.tool_names = :old_hash
));
