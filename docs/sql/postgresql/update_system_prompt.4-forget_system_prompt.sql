-- statements.forget_system_prompt(), sent by update_system_prompt(session_id, system_prompt)
-- PostgreSQL (psycopg): step 4 of 4, when the session pointed at another prompt.

DELETE FROM system_prompts
WHERE system_prompts.hash = :old_hash::VARCHAR AND NOT (EXISTS (
  SELECT *
  FROM sessions
  WHERE sessions.system_prompt_hash = :old_hash::VARCHAR OR sessions.tool_names = :old_hash::VARCHAR
));
