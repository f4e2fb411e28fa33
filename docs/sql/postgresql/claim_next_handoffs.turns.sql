-- statements.claim_next(turns=True), sent by claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :handoff_attempt_1 = 1.

WITH RECURSIVE picked AS (
  SELECT sessions.id AS id, sessions.started_at AS started_at
  FROM sessions
  WHERE sessions.handoff_state = 'pending' AND sessions.id != ALL (:exclude::VARCHAR[])
  ORDER BY sessions.started_at, sessions.id
  LIMIT :limit
  FOR UPDATE SKIP LOCKED
),
lineage(start, node, up, depth, path, forked) AS (
  SELECT CAST(picked.id AS VARCHAR(255)) AS start, CAST(picked.id AS VARCHAR(255)) AS node,
      lineage_first.parent_session_id AS up, 0 AS depth,
      CAST(ARRAY[CAST(picked.id AS VARCHAR(255))] AS VARCHAR[]) AS path,
      CASE WHEN (lineage_first.source = 'tool'
          OR substring(lineage_first.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_first.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = lineage_first.parent_session_id
          OR substring(lineage_first.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_first.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = lineage_first.parent_session_id
          OR substring(lineage_first.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_first.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = lineage_first.parent_session_id) THEN 1 ELSE 0 END AS forked
  FROM picked
  LEFT OUTER JOIN sessions AS lineage_first ON lineage_first.id = picked.id
  UNION ALL
  SELECT lineage.start AS start, lineage_parent.id AS id,
      lineage_parent.parent_session_id AS parent_session_id, lineage.depth + 1 AS anon_4,
      array_append(lineage.path, lineage_parent.id) AS array_append_1,
      CASE WHEN (lineage_parent.source = 'tool'
          OR substring(lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = lineage_parent.parent_session_id
          OR substring(lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = lineage_parent.parent_session_id
          OR substring(lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = lineage_parent.parent_session_id) THEN 1 ELSE 0 END AS anon_5
  FROM lineage
  JOIN sessions AS lineage_parent ON lineage_parent.id = lineage.up
  WHERE lineage_parent.end_reason = 'compression' AND lineage.depth < 100 AND lineage.forked = 0
      AND lineage_parent.id != ALL (lineage.path)
),
lineage_roots AS (
  SELECT DISTINCT ON (lineage.start) lineage.start AS id, lineage.node AS conversation
  FROM lineage
  ORDER BY lineage.start, lineage.depth DESC
),
chosen AS (
  SELECT DISTINCT ON (lineage_roots.conversation) lineage_roots.id AS id,
      lineage_roots.conversation AS conversation, left('handoff:'
          || left(encode(sha256(convert_to(lineage_roots.id, 'UTF8')), 'hex'), 16) || ':'
          || :turn_gateway::VARCHAR, 255) AS holder
  FROM lineage_roots
  JOIN picked ON picked.id = lineage_roots.id
  ORDER BY lineage_roots.conversation, picked.started_at, picked.id
),
taken AS (
  INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
  SELECT chosen.conversation AS conversation, chosen.holder AS holder, :now AS anon_6,
      :turn_until AS anon_7
  FROM chosen
  ORDER BY chosen.conversation
  ON CONFLICT (conversation_id) DO UPDATE
  SET holder = excluded.holder,
      acquired_at = CASE WHEN (session_turn_leases.holder = excluded.holder
          AND session_turn_leases.expires_at > :now) THEN session_turn_leases.acquired_at ELSE excluded.acquired_at END,
      expires_at = CASE WHEN (session_turn_leases.holder = excluded.holder
          AND session_turn_leases.expires_at > :now) THEN session_turn_leases.expires_at ELSE excluded.expires_at END
  WHERE session_turn_leases.expires_at <= :now OR session_turn_leases.holder = excluded.holder
  RETURNING session_turn_leases.conversation_id
),
leased AS (
  SELECT chosen.id AS id
  FROM chosen
  JOIN taken ON taken.conversation_id = chosen.conversation
),
moved AS (
  UPDATE sessions
  SET handoff_state='running', handoff_claimed_at=:now, handoff_owner=:owner::VARCHAR,
      handoff_lease_expires_at=:lease_expires_at,
      handoff_attempt=(sessions.handoff_attempt + :handoff_attempt_1::INTEGER)
  FROM leased
  WHERE sessions.id = leased.id AND sessions.handoff_state = 'pending'
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
SELECT picked.id AS _picked_id, moved.id, moved.source, moved.user_id, moved.title, moved.model,
    moved.parent_session_id, moved.started_at, moved.ended_at, moved.end_reason,
    moved.handoff_state, moved.handoff_platform, moved.handoff_error, moved.handoff_requested_at,
    moved.handoff_claimed_at, moved.handoff_finished_at, moved.handoff_owner,
    moved.handoff_lease_expires_at, moved.handoff_attempt, moved.model_config, moved.system_prompt,
    moved.message_count, moved.tool_call_count, moved.input_tokens, moved.output_tokens,
    moved.cache_read_tokens, moved.cache_write_tokens, moved.reasoning_tokens,
    moved.billing_provider, moved.billing_base_url, moved.billing_mode, moved.estimated_cost_usd,
    moved.actual_cost_usd, moved.cost_status, moved.cost_source, moved.pricing_version,
    moved.api_call_count, moved.last_activity_at, moved.created_source, moved.session_key,
    moved.chat_id, moved.chat_type, moved.thread_id, moved.display_name, moved.origin_json,
    moved.expiry_finalized, moved.system_prompt_hash, moved.cwd, moved.git_branch,
    moved.git_repo_root, moved.git_metadata_generation, moved.title_source,
    moved.last_activity_description, moved.last_activity_provenance,
    moved.compression_failure_cooldown_until, moved.compression_failure_error,
    moved.compression_fallback_streak, moved.compression_ineffective_count,
    moved.compression_recovery_deadline, moved.compression_overload_streak, moved.profile_name,
    moved.transport_profile, moved.rewind_count, moved.archived, moved.auto_archived, moved.pinned,
    moved.hidden, moved.last_read_at, moved.tool_names
FROM picked
LEFT OUTER JOIN moved ON moved.id = picked.id;
