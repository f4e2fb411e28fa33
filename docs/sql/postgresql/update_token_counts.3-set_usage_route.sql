-- statements.set_usage_route(), sent by update_token_counts(session_id, input_tokens, ...)
-- PostgreSQL (psycopg): step 3 of 5, the first accounted call, on another route.

UPDATE sessions
SET model=:model::VARCHAR, billing_provider=:billing_provider::VARCHAR,
    billing_base_url=:billing_base_url::VARCHAR, billing_mode=:billing_mode::VARCHAR
WHERE sessions.id = :session_id::VARCHAR;
