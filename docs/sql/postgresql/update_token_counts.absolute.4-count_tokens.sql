-- statements.count_tokens(absolute=True), sent by update_token_counts(session_id, ..., absolute=True)
-- PostgreSQL (psycopg): step 4 of 4.
-- Parameters the statement carries: :coalesce_1 = 0.

UPDATE sessions
SET model=coalesce(sessions.model, :route_model::VARCHAR), input_tokens=:input_tokens::INTEGER,
    output_tokens=:output_tokens::INTEGER, cache_read_tokens=:cache_read_tokens::INTEGER,
    cache_write_tokens=:cache_write_tokens::INTEGER, reasoning_tokens=:reasoning_tokens::INTEGER,
    billing_provider=coalesce(sessions.billing_provider, :route_billing_provider::VARCHAR),
    billing_base_url=coalesce(sessions.billing_base_url, :route_billing_base_url::VARCHAR),
    billing_mode=coalesce(sessions.billing_mode, :route_billing_mode::VARCHAR),
    estimated_cost_usd=coalesce(:estimated_cost_usd, :coalesce_1::INTEGER),
    actual_cost_usd=CASE WHEN (CAST(:actual_cost_usd AS DOUBLE PRECISION) IS NULL) THEN sessions.actual_cost_usd ELSE :actual_cost_usd END,
    cost_status=coalesce(:cost_status::VARCHAR, sessions.cost_status),
    cost_source=coalesce(:cost_source::VARCHAR, sessions.cost_source),
    pricing_version=coalesce(:pricing_version::VARCHAR, sessions.pricing_version),
    api_call_count=:api_call_count::INTEGER
WHERE sessions.id = :session_id::VARCHAR;
