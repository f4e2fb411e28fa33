-- statements.delete_unreferenced_prompts(), sent by delete_session(session_id)
-- SQLite (pysqlite): step 10 of 10.

DELETE FROM system_prompts
WHERE NOT (EXISTS (
  SELECT sessions.id
  FROM sessions
  WHERE sessions.system_prompt_hash = system_prompts.hash
)) AND NOT (EXISTS (
  SELECT sessions.id
  FROM sessions
  WHERE sessions.tool_names = system_prompts.hash
));
