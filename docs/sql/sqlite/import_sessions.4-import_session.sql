-- statements.import_session(), sent by import_sessions(sessions)
-- SQLite (pysqlite): step 4 of 8, once per record not skipped.

INSERT INTO sessions (id, source, user_id, title, model, started_at, model_config, message_count,
    tool_call_count, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    reasoning_tokens, billing_provider, billing_base_url, billing_mode, estimated_cost_usd,
    actual_cost_usd, cost_status, cost_source, pricing_version, api_call_count, system_prompt_hash,
    cwd, git_branch, git_repo_root, archived)
VALUES (:id, :source, :user_id, :title, :model, :started_at, :model_config, 0, 0, :input_tokens,
    :output_tokens, :cache_read_tokens, :cache_write_tokens, :reasoning_tokens, :billing_provider,
    :billing_base_url, :billing_mode, :estimated_cost_usd, :actual_cost_usd, :cost_status,
    :cost_source, :pricing_version, :api_call_count, :system_prompt_hash, :cwd, :git_branch,
    :git_repo_root, :archived);
