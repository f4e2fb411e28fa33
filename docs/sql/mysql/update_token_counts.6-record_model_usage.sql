-- statements.record_model_usage(dialect_name='mysql'), sent by update_token_counts(session_id, input_tokens, ...)
-- MySQL 8.0 (PyMySQL): step 6 of 6, when the call has usage.

INSERT INTO session_model_usage (session_id, model, billing_provider, billing_base_url,
    billing_mode, task, api_call_count, input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status,
    cost_source, first_seen, last_seen)
VALUES (:session_id, :model, :billing_provider, :billing_base_url, :billing_mode, :task,
    :api_call_count, :input_tokens, :output_tokens, :cache_read_tokens, :cache_write_tokens,
    :reasoning_tokens, :estimated_cost_usd, :actual_cost_usd, :cost_status, :cost_source,
    :first_seen, :last_seen) AS new
ON DUPLICATE KEY UPDATE api_call_count = (session_model_usage.api_call_count + new.api_call_count),
    input_tokens = (session_model_usage.input_tokens + new.input_tokens),
    output_tokens = (session_model_usage.output_tokens + new.output_tokens),
    cache_read_tokens = (session_model_usage.cache_read_tokens + new.cache_read_tokens),
    cache_write_tokens = (session_model_usage.cache_write_tokens + new.cache_write_tokens),
    reasoning_tokens = (session_model_usage.reasoning_tokens + new.reasoning_tokens),
    estimated_cost_usd = (session_model_usage.estimated_cost_usd + new.estimated_cost_usd),
    actual_cost_usd = (session_model_usage.actual_cost_usd + new.actual_cost_usd),
    cost_status = coalesce(new.cost_status, session_model_usage.cost_status),
    cost_source = coalesce(new.cost_source, session_model_usage.cost_source),
    last_seen = new.last_seen;
