-- statements.get_session(), sent by export_session(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 2.

SELECT sessions.id, sessions.source, sessions.user_id, sessions.title, sessions.model,
    sessions.parent_session_id, sessions.started_at, sessions.ended_at, sessions.end_reason,
    sessions.handoff_state, sessions.handoff_platform, sessions.handoff_error,
    sessions.handoff_requested_at, sessions.handoff_claimed_at, sessions.handoff_finished_at,
    sessions.handoff_owner, sessions.handoff_lease_expires_at, sessions.handoff_attempt,
    sessions.model_config, coalesce((
      SELECT system_prompts.prompt
      FROM system_prompts
      WHERE system_prompts.hash = sessions.system_prompt_hash
    ), sessions.system_prompt) AS system_prompt, sessions.message_count, sessions.tool_call_count,
    sessions.input_tokens, sessions.output_tokens, sessions.cache_read_tokens,
    sessions.cache_write_tokens, sessions.reasoning_tokens, sessions.billing_provider,
    sessions.billing_base_url, sessions.billing_mode, sessions.estimated_cost_usd,
    sessions.actual_cost_usd, sessions.cost_status, sessions.cost_source, sessions.pricing_version,
    sessions.api_call_count, sessions.last_activity_at, sessions.created_source,
    sessions.session_key, sessions.chat_id, sessions.chat_type, sessions.thread_id,
    sessions.display_name, sessions.origin_json, sessions.expiry_finalized,
    sessions.system_prompt_hash, sessions.cwd, sessions.git_branch, sessions.git_repo_root,
    sessions.git_metadata_generation, sessions.title_source, sessions.last_activity_description,
    sessions.last_activity_provenance, sessions.compression_failure_cooldown_until,
    sessions.compression_failure_error, sessions.compression_fallback_streak,
    sessions.compression_ineffective_count, sessions.compression_recovery_deadline,
    sessions.compression_overload_streak, sessions.profile_name, sessions.transport_profile,
    sessions.rewind_count, sessions.archived, sessions.auto_archived, sessions.pinned,
    sessions.hidden, sessions.last_read_at, sessions.tool_names
FROM sessions
WHERE sessions.id = :session_id;
