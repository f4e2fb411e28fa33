-- statements.append_message(returning=False), sent by append_message(session_id, role, content, turn_lease_holder=holder)
-- MySQL 8.0 (PyMySQL): step 4 of 5.

INSERT INTO messages (session_id, `role`, content, timestamp, tool_call_id, tool_calls, tool_name,
    effect_disposition, token_count, finish_reason, reasoning, reasoning_content, reasoning_details,
    codex_reasoning_items, codex_message_items, platform_message_id, observed, _compressed_summary,
    api_content, display_kind, display_metadata, active)
SELECT :session_id AS anon_1, :role AS anon_2, :content AS anon_3, :now AS anon_4,
    :tool_call_id AS anon_5, :tool_calls AS anon_6, :tool_name AS anon_7,
    :effect_disposition AS anon_8, :token_count AS anon_9, :finish_reason AS anon_10,
    :reasoning AS anon_11, :reasoning_content AS anon_12, :reasoning_details AS anon_13,
    :codex_reasoning_items AS anon_14, :codex_message_items AS anon_15,
    :platform_message_id AS anon_16, :observed AS anon_17, :_compressed_summary AS anon_18,
    :api_content AS anon_19, :display_kind AS anon_20, :display_metadata AS anon_21, 1
FROM DUAL
WHERE EXISTS (
  SELECT *
  FROM sessions
  WHERE sessions.id = :session_id AND (sessions.ended_at IS NULL OR sessions.end_reason IS NULL
      OR sessions.end_reason != 'compression')
);
