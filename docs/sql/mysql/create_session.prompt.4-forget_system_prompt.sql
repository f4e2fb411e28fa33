-- statements.forget_system_prompt(), sent by create_session(session_id, source, system_prompt=...)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 4 of 4, when the id existed: its own prompt stays.

DELETE FROM system_prompts
WHERE system_prompts.hash = :old_hash AND NOT (EXISTS (
  SELECT *
  FROM sessions
  WHERE sessions.system_prompt_hash = :old_hash OR sessions.tool_names = :old_hash
));
