-- statements.delete_unreferenced_prompts(), sent by clear_session_messages(session_id, before_timestamp=when)
-- PostgreSQL (psycopg): step 5 of 5.

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
