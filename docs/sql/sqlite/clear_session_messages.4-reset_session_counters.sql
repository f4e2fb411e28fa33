-- statements.reset_session_counters(), sent by clear_session_messages(session_id)
-- SQLite (pysqlite): step 4 of 6, when no message is left.
-- Parameters the statement carries: :message_count = 0, :tool_call_count = 0, :input_tokens = 0, :output_tokens = 0, :cache_read_tokens = 0, :cache_write_tokens = 0, :reasoning_tokens = 0, :api_call_count = 0.

UPDATE sessions
SET message_count=:message_count, tool_call_count=:tool_call_count, input_tokens=:input_tokens,
    output_tokens=:output_tokens, cache_read_tokens=:cache_read_tokens,
    cache_write_tokens=:cache_write_tokens, reasoning_tokens=:reasoning_tokens,
    api_call_count=:api_call_count, last_activity_at=:now
WHERE sessions.id = :session_id;
