-- statements.record_model_usage(dialect_name='sqlite'), sent by update_token_counts(session_id, input_tokens, ...)
-- SQLite (pysqlite): step 5 of 5, when the call has usage.

INSERT INTO session_model_usage (session_id, model, billing_provider, billing_base_url,
    billing_mode, task, api_call_count, input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status,
    cost_source, first_seen, last_seen)
VALUES (:session_id, :model, :billing_provider, :billing_base_url, :billing_mode, :task,
    :api_call_count, :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens,
    :reasoning_tokens, :estimated_cost_usd, :actual_cost_usd, :cost_status, :cost_source,
    :first_seen, :last_seen)
ON CONFLICT (session_id, model, billing_provider, billing_base_url, billing_mode, task) DO UPDATE
SET api_call_count = (session_model_usage.api_call_count + excluded.api_call_count),
    input_tokens = (session_model_usage.input_tokens + excluded.input_tokens),
    output_tokens = (session_model_usage.output_tokens + excluded.output_tokens),
    cache_read_tokens = (session_model_usage.cache_read_tokens + excluded.cache_read_tokens),
    cache_write_tokens = (session_model_usage.cache_write_tokens + excluded.cache_write_tokens),
    reasoning_tokens = (session_model_usage.reasoning_tokens + excluded.reasoning_tokens),
    estimated_cost_usd = (session_model_usage.estimated_cost_usd + excluded.estimated_cost_usd),
    actual_cost_usd = (session_model_usage.actual_cost_usd + excluded.actual_cost_usd),
    cost_status = coalesce(excluded.cost_status, session_model_usage.cost_status),
    cost_source = coalesce(excluded.cost_source, session_model_usage.cost_source),
    last_seen = excluded.last_seen;
