-- statements.import_message(), sent by import_sessions(sessions)
-- SQLite (pysqlite): step 5 of 8, once per message.

INSERT INTO messages (session_id, role, content, timestamp, tool_call_id, tool_calls, tool_name,
    effect_disposition, token_count, finish_reason, reasoning, reasoning_content, reasoning_details,
    codex_reasoning_items, codex_message_items, platform_message_id, observed, active, api_content,
    display_kind, display_metadata, _compressed_summary)
VALUES (:session_id, :role, :content, :now, :tool_call_id, :tool_calls, :tool_name,
    :effect_disposition, :token_count, :finish_reason, :reasoning, :reasoning_content,
    :reasoning_details, :codex_reasoning_items, :codex_message_items, :platform_message_id,
    :observed, 1, :api_content, :display_kind, :display_metadata, :_compressed_summary);
