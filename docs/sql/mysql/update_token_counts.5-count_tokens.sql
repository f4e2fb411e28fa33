-- statements.count_tokens(absolute=False), sent by update_token_counts(session_id, input_tokens, ...)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 5 of 6.
-- Parameters the statement carries: :coalesce_1 = 0, :coalesce_2 = 0, :coalesce_3 = 0, :coalesce_4 = 0.

UPDATE sessions
SET model=coalesce(sessions.model, :route_model),
    input_tokens=(sessions.input_tokens + :input_tokens),
    output_tokens=(sessions.output_tokens + :output_tokens),
    cache_read_tokens=(sessions.cache_read_tokens + :cache_read_tokens),
    cache_write_tokens=(sessions.cache_write_tokens + :cache_write_tokens),
    reasoning_tokens=(sessions.reasoning_tokens + :reasoning_tokens),
    billing_provider=coalesce(sessions.billing_provider, :route_billing_provider),
    billing_base_url=coalesce(sessions.billing_base_url, :route_billing_base_url),
    billing_mode=coalesce(sessions.billing_mode, :route_billing_mode),
    estimated_cost_usd=(coalesce(sessions.estimated_cost_usd, :coalesce_1) + coalesce(:estimated_cost_usd,
        :coalesce_2)),
    actual_cost_usd=CASE WHEN (CAST(:actual_cost_usd AS DOUBLE) IS NULL) THEN sessions.actual_cost_usd ELSE coalesce(sessions.actual_cost_usd,
        :coalesce_3) + :actual_cost_usd END,
    cost_status=coalesce(:cost_status, sessions.cost_status), cost_source=coalesce(:cost_source,
        sessions.cost_source), pricing_version=coalesce(:pricing_version, sessions.pricing_version),
    api_call_count=(coalesce(sessions.api_call_count, :coalesce_4) + :api_call_count)
WHERE sessions.id = :session_id;
