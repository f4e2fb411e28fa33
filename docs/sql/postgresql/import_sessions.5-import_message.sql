-- statements.import_message(), sent by import_sessions(sessions)
-- PostgreSQL (psycopg): step 5 of 8, once per message.

INSERT INTO messages (session_id, role, content, timestamp, tool_call_id, tool_calls, tool_name,
    effect_disposition, token_count, finish_reason, reasoning, reasoning_content, reasoning_details,
    codex_reasoning_items, codex_message_items, platform_message_id, observed, active, api_content,
    display_kind, display_metadata, _compressed_summary)
VALUES (:session_id::VARCHAR, :role::VARCHAR, :content::VARCHAR, :now, :tool_call_id::VARCHAR,
    :tool_calls::VARCHAR, :tool_name::VARCHAR, :effect_disposition::VARCHAR, :token_count::INTEGER,
    :finish_reason::VARCHAR, :reasoning::VARCHAR, :reasoning_content::VARCHAR,
    :reasoning_details::VARCHAR, :codex_reasoning_items::VARCHAR, :codex_message_items::VARCHAR,
    :platform_message_id::VARCHAR, :observed::INTEGER, 1, :api_content::VARCHAR,
    :display_kind::VARCHAR, :display_metadata::VARCHAR, :_compressed_summary::INTEGER)
RETURNING messages.id;
