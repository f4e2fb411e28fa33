-- statements.import_session(), sent by import_sessions(sessions)
-- PostgreSQL (psycopg): step 4 of 8, once per record not skipped.

INSERT INTO sessions (id, source, user_id, title, model, started_at, model_config, message_count,
    tool_call_count, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    reasoning_tokens, billing_provider, billing_base_url, billing_mode, estimated_cost_usd,
    actual_cost_usd, cost_status, cost_source, pricing_version, api_call_count, system_prompt_hash,
    cwd, git_branch, git_repo_root, archived)
VALUES (:id::VARCHAR, :source::VARCHAR, :user_id::VARCHAR, :title::VARCHAR, :model::VARCHAR,
    :started_at, :model_config::VARCHAR, 0, 0, :input_tokens::INTEGER, :output_tokens::INTEGER,
    :cache_read_tokens::INTEGER, :cache_write_tokens::INTEGER, :reasoning_tokens::INTEGER,
    :billing_provider::VARCHAR, :billing_base_url::VARCHAR, :billing_mode::VARCHAR,
    :estimated_cost_usd, :actual_cost_usd, :cost_status::VARCHAR, :cost_source::VARCHAR,
    :pricing_version::VARCHAR, :api_call_count::INTEGER, :system_prompt_hash::VARCHAR,
    :cwd::VARCHAR, :git_branch::VARCHAR, :git_repo_root::VARCHAR, :archived::INTEGER);
