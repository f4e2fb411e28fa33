-- statements.claim_pending_transition(by_platform=True).apply, sent by claim_pending_handoffs(limit, platform=platform)
-- SQLite (pysqlite): step 2 of 2.
-- Parameters the statement carries: :handoff_attempt_1 = 1, :param_1 = 0.

UPDATE sessions
SET handoff_state='running', handoff_claimed_at=:now, handoff_owner=:owner,
    handoff_lease_expires_at=:lease_expires_at,
    handoff_attempt=(sessions.handoff_attempt + :handoff_attempt_1)
WHERE sessions.rowid IN (
  SELECT sessions.rowid
  FROM sessions
  WHERE sessions.handoff_state = 'pending' AND sessions.handoff_platform = :platform
  ORDER BY sessions.started_at, sessions.id
  LIMIT :limit
  OFFSET :param_1
)
RETURNING id, source, user_id, title, model, parent_session_id, started_at, ended_at, end_reason,
    handoff_state, handoff_platform, handoff_error, handoff_requested_at, handoff_claimed_at,
    handoff_finished_at, handoff_owner, handoff_lease_expires_at, handoff_attempt, model_config,
    coalesce((
      SELECT system_prompts.prompt
      FROM system_prompts
      WHERE hash = system_prompt_hash
    ), system_prompt) AS system_prompt, message_count, tool_call_count, input_tokens, output_tokens,
    cache_read_tokens, cache_write_tokens, reasoning_tokens, billing_provider, billing_base_url,
    billing_mode, estimated_cost_usd, actual_cost_usd, cost_status, cost_source, pricing_version,
    api_call_count, last_activity_at, created_source, session_key, chat_id, chat_type, thread_id,
    display_name, origin_json, expiry_finalized, system_prompt_hash, cwd, git_branch, git_repo_root,
    git_metadata_generation, title_source, last_activity_description, last_activity_provenance,
    compression_failure_cooldown_until, compression_failure_error, compression_fallback_streak,
    compression_ineffective_count, compression_recovery_deadline, compression_overload_streak,
    profile_name, transport_profile, rewind_count, archived, auto_archived, pinned, hidden,
    last_read_at, tool_names;
