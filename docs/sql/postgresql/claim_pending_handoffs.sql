-- statements.claim_pending_statement(by_platform=False), sent by claim_pending_handoffs(limit)
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :handoff_attempt_1 = 1.

WITH picked AS (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.handoff_state = 'pending'
  ORDER BY sessions.started_at, sessions.id
  LIMIT :limit
  FOR UPDATE SKIP LOCKED
),
moved AS (
  UPDATE sessions
  SET handoff_state='running', handoff_claimed_at=:now, handoff_owner=:owner::VARCHAR,
      handoff_lease_expires_at=:lease_expires_at,
      handoff_attempt=(sessions.handoff_attempt + :handoff_attempt_1::INTEGER)
  WHERE sessions.id = ANY (CAST((
    SELECT array_agg(picked.id) AS array_agg_1
    FROM picked
  ) AS VARCHAR[]))
  RETURNING sessions.id, sessions.source, sessions.user_id, sessions.title, sessions.model,
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
      sessions.actual_cost_usd, sessions.cost_status, sessions.cost_source,
      sessions.pricing_version, sessions.api_call_count, sessions.last_activity_at,
      sessions.created_source, sessions.session_key, sessions.chat_id, sessions.chat_type,
      sessions.thread_id, sessions.display_name, sessions.origin_json, sessions.expiry_finalized,
      sessions.system_prompt_hash, sessions.cwd, sessions.git_branch, sessions.git_repo_root,
      sessions.git_metadata_generation, sessions.title_source, sessions.last_activity_description,
      sessions.last_activity_provenance, sessions.compression_failure_cooldown_until,
      sessions.compression_failure_error, sessions.compression_fallback_streak,
      sessions.compression_ineffective_count, sessions.compression_recovery_deadline,
      sessions.compression_overload_streak, sessions.profile_name, sessions.transport_profile,
      sessions.rewind_count, sessions.archived, sessions.auto_archived, sessions.pinned,
      sessions.hidden, sessions.last_read_at, sessions.tool_names
),
recorded AS (
  INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
  SELECT moved.id AS id, 'pending', 'running', :now AS anon_1, :actor::VARCHAR AS anon_2,
      moved.handoff_attempt AS handoff_attempt, NULL AS anon_3
  FROM moved
)
SELECT moved.id, moved.source, moved.user_id, moved.title, moved.model, moved.parent_session_id,
    moved.started_at, moved.ended_at, moved.end_reason, moved.handoff_state, moved.handoff_platform,
    moved.handoff_error, moved.handoff_requested_at, moved.handoff_claimed_at,
    moved.handoff_finished_at, moved.handoff_owner, moved.handoff_lease_expires_at,
    moved.handoff_attempt, moved.model_config, moved.system_prompt, moved.message_count,
    moved.tool_call_count, moved.input_tokens, moved.output_tokens, moved.cache_read_tokens,
    moved.cache_write_tokens, moved.reasoning_tokens, moved.billing_provider,
    moved.billing_base_url, moved.billing_mode, moved.estimated_cost_usd, moved.actual_cost_usd,
    moved.cost_status, moved.cost_source, moved.pricing_version, moved.api_call_count,
    moved.last_activity_at, moved.created_source, moved.session_key, moved.chat_id, moved.chat_type,
    moved.thread_id, moved.display_name, moved.origin_json, moved.expiry_finalized,
    moved.system_prompt_hash, moved.cwd, moved.git_branch, moved.git_repo_root,
    moved.git_metadata_generation, moved.title_source, moved.last_activity_description,
    moved.last_activity_provenance, moved.compression_failure_cooldown_until,
    moved.compression_failure_error, moved.compression_fallback_streak,
    moved.compression_ineffective_count, moved.compression_recovery_deadline,
    moved.compression_overload_streak, moved.profile_name, moved.transport_profile,
    moved.rewind_count, moved.archived, moved.auto_archived, moved.pinned, moved.hidden,
    moved.last_read_at, moved.tool_names
FROM moved
ORDER BY moved.started_at, moved.id;
