-- statements.rich_sessions_by_activity(dialect='mysql', chosen=SessionFilter(listable_only=True, by_sources=False, by_session_key=False, excluding_sources=False, by_cwd=False, by_message_count=False, archived='any', visible_only=True, own_dm=False), compact=False, by_id=True), sent by search_sessions_by_id('pend')
-- MySQL 8.0 (PyMySQL): the operation's one statement.
-- Parameters the statement carries: :empty = '', :summary_opening = '[CONTEXT COMPACTION — REFERENCE ONLY] Earlier turns were compacted into the summary below. This is a handoff from a previous context window — treat it as background reference, NOT as active instructions. ', :legacy_summary_opening = '[CONTEXT SUMMARY]:', :summary_end = '--- END OF CONTEXT SUMMARY — respond to the message below, not the summary above ---', :merged_delimiter = '[END OF PRIOR CONTEXT — COMPACTION SUMMARY BELOW]', :merged_header = '[PRIOR CONTEXT — for reference only; not a new message]', :hidden = 'hidden'.

WITH RECURSIVE chain(root_id, cur_id) AS (
  SELECT sessions.id AS root_id, sessions.id AS cur_id
  FROM sessions
  WHERE (sessions.parent_session_id IS NULL
      OR CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
          '$._branched_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL OR (EXISTS (
            SELECT *
            FROM sessions AS sessions_parent
            WHERE sessions_parent.id = sessions.parent_session_id
                AND sessions_parent.end_reason = 'branched'
                AND sessions.started_at >= sessions_parent.ended_at
          ))
      OR CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
          '$._reset_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL OR (EXISTS (
            SELECT *
            FROM sessions AS sessions_parent
            WHERE sessions_parent.id = sessions.parent_session_id
                AND sessions_parent.end_reason IN ('session_reset', 'session_switch', 'idle', 'daily',
                    'suspended', 'resume_pending_expired') AND sessions.session_key IS NOT NULL
                AND sessions.session_key != :empty AND sessions.session_key = sessions_parent.session_key
          )))
      AND CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
          '$._delegate_from')) COLLATE utf8mb4_unicode_ci END IS NULL AND sessions.hidden = 0
  UNION
  SELECT chain.root_id AS root_id, child.id AS id
  FROM chain INNER
  JOIN sessions AS parent ON parent.id = chain.cur_id INNER
  JOIN sessions AS child ON child.parent_session_id = parent.id
      AND parent.end_reason = 'compression'
      AND CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
          '$._branched_from')) COLLATE utf8mb4_unicode_ci END IS NULL
      AND CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
          '$._delegate_from')) COLLATE utf8mb4_unicode_ci END IS NULL
      AND NOT (CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
          '$._reset_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL OR (EXISTS (
            SELECT *
            FROM sessions AS child_parent
            WHERE child_parent.id = child.parent_session_id
                AND child_parent.end_reason IN ('session_reset', 'session_switch', 'idle', 'daily',
                    'suspended', 'resume_pending_expired') AND child.session_key IS NOT NULL
                AND child.session_key != :empty AND child.session_key = child_parent.session_key
          ))) AND coalesce(child.source, :empty) != 'tool'
),
chain_latest AS (
  SELECT chain_activity.root_id AS root_id, max(chain_activity.activity) AS activity
  FROM (
    SELECT chain.root_id AS root_id,
        coalesce(coalesce(greatest(CASE WHEN (segment.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN segment.last_activity_at END,
            (
              SELECT max(segment_newest.timestamp) AS max_2
              FROM messages AS segment_newest
              WHERE segment_newest.session_id = segment.id AND segment_newest.timestamp BETWEEN 0.0
                  AND 4102444800.0
            )),
            CASE WHEN (segment.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN segment.last_activity_at END,
            (
              SELECT max(segment_newest.timestamp) AS max_2
              FROM messages AS segment_newest
              WHERE segment_newest.session_id = segment.id AND segment_newest.timestamp BETWEEN 0.0
                  AND 4102444800.0
            )),
            CASE WHEN (segment.started_at BETWEEN 0.0 AND 4102444800.0) THEN segment.started_at END) AS activity
    FROM chain INNER
    JOIN sessions AS segment ON segment.id = chain.cur_id
  ) AS chain_activity
  GROUP BY chain_activity.root_id
)
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
    sessions.hidden, sessions.last_read_at, sessions.tool_names,
    coalesce(coalesce(greatest(CASE WHEN (sessions.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN sessions.last_activity_at END,
        (
          SELECT max(sessions_newest.timestamp) AS max_1
          FROM messages AS sessions_newest
          WHERE sessions_newest.session_id = sessions.id AND sessions_newest.timestamp BETWEEN 0.0
              AND 4102444800.0
        )),
        CASE WHEN (sessions.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN sessions.last_activity_at END,
        (
          SELECT max(sessions_newest.timestamp) AS max_1
          FROM messages AS sessions_newest
          WHERE sessions_newest.session_id = sessions.id AND sessions_newest.timestamp BETWEEN 0.0
              AND 4102444800.0
        )),
        CASE WHEN (sessions.started_at BETWEEN 0.0 AND 4102444800.0) THEN sessions.started_at END) AS last_active,
    coalesce((
      SELECT CASE WHEN (substr(regexp_replace(sessions_first.content, '^[[:space:]]+', :empty), 1,
          204) = :summary_opening OR substr(regexp_replace(sessions_first.content, '^[[:space:]]+',
              :empty), 1, 18) = :legacy_summary_opening) THEN substr(sessions_first.content,
          instr(sessions_first.content, :summary_end) + 84) WHEN (instr(sessions_first.content,
          :merged_delimiter) > 0 AND (substr(regexp_replace(substr(sessions_first.content,
              instr(sessions_first.content, :merged_delimiter) + 49), '^[[:space:]]+', :empty), 1, 204) = :summary_opening
              OR substr(regexp_replace(substr(sessions_first.content, instr(sessions_first.content,
                  :merged_delimiter) + 49), '^[[:space:]]+', :empty), 1, 18) = :legacy_summary_opening)) THEN CASE WHEN (substr(regexp_replace(regexp_replace(substr(sessions_first.content,
          1, instr(sessions_first.content, :merged_delimiter) - 1), '^[[:space:]]+|[[:space:]]+$',
          :empty), '^[[:space:]]+', :empty), 1, 55) = :merged_header) THEN regexp_replace(substr(regexp_replace(regexp_replace(substr(sessions_first.content,
          1, instr(sessions_first.content, :merged_delimiter) - 1), '^[[:space:]]+|[[:space:]]+$',
          :empty), '^[[:space:]]+', :empty), 56), '^[[:space:]]+', :empty) ELSE regexp_replace(substr(sessions_first.content,
          1, instr(sessions_first.content, :merged_delimiter) - 1), '^[[:space:]]+|[[:space:]]+$',
          :empty) END ELSE substr(sessions_first.content, 1, 63) END AS anon_1
      FROM messages AS sessions_first
      WHERE sessions_first.session_id = sessions.id AND sessions_first.`role` = 'user'
          AND sessions_first.content IS NOT NULL
          AND coalesce(sessions_first.display_kind, :empty) != :hidden
          AND (NOT (substr(regexp_replace(sessions_first.content, '^[[:space:]]+', :empty), 1, 204) = :summary_opening
              OR substr(regexp_replace(sessions_first.content, '^[[:space:]]+', :empty), 1, 18) = :legacy_summary_opening)
              AND NOT (instr(sessions_first.content, :merged_delimiter) > 0
                  AND (substr(regexp_replace(substr(sessions_first.content,
                      instr(sessions_first.content, :merged_delimiter) + 49), '^[[:space:]]+',
                      :empty), 1, 204) = :summary_opening
                      OR substr(regexp_replace(substr(sessions_first.content,
                          instr(sessions_first.content, :merged_delimiter) + 49), '^[[:space:]]+',
                          :empty), 1, 18) = :legacy_summary_opening))
              OR (substr(regexp_replace(sessions_first.content, '^[[:space:]]+', :empty), 1, 204) = :summary_opening
                  OR substr(regexp_replace(sessions_first.content, '^[[:space:]]+', :empty), 1, 18) = :legacy_summary_opening)
              AND instr(sessions_first.content, :summary_end) > 0
              AND length(regexp_replace(substr(sessions_first.content, instr(sessions_first.content,
                  :summary_end) + 84), '^[[:space:]]+|[[:space:]]+$', :empty)) > 0
              OR instr(sessions_first.content, :merged_delimiter) > 0
              AND (substr(regexp_replace(substr(sessions_first.content,
                  instr(sessions_first.content, :merged_delimiter) + 49), '^[[:space:]]+', :empty),
                  1, 204) = :summary_opening OR substr(regexp_replace(substr(sessions_first.content,
                      instr(sessions_first.content, :merged_delimiter) + 49), '^[[:space:]]+', :empty),
                      1, 18) = :legacy_summary_opening)
              AND length(regexp_replace(CASE WHEN (substr(regexp_replace(regexp_replace(substr(sessions_first.content,
                  1, instr(sessions_first.content, :merged_delimiter) - 1),
                  '^[[:space:]]+|[[:space:]]+$', :empty), '^[[:space:]]+', :empty), 1, 55) = :merged_header) THEN regexp_replace(substr(regexp_replace(regexp_replace(substr(sessions_first.content,
                  1, instr(sessions_first.content, :merged_delimiter) - 1),
                  '^[[:space:]]+|[[:space:]]+$', :empty), '^[[:space:]]+', :empty), 56),
                  '^[[:space:]]+', :empty) ELSE regexp_replace(substr(sessions_first.content, 1,
                  instr(sessions_first.content, :merged_delimiter) - 1),
                  '^[[:space:]]+|[[:space:]]+$', :empty) END, '^[[:space:]]+|[[:space:]]+$', :empty)) > 0)
      ORDER BY sessions_first.timestamp, sessions_first.id
      LIMIT 1
    ), :empty) AS _preview_raw,
    coalesce(chain_latest.activity, sessions.started_at) AS _effective_last_active
FROM sessions
LEFT OUTER JOIN chain_latest ON chain_latest.root_id = sessions.id
WHERE (sessions.parent_session_id IS NULL
    OR CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
        '$._branched_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL OR (EXISTS (
          SELECT *
          FROM sessions AS sessions_parent
          WHERE sessions_parent.id = sessions.parent_session_id AND sessions_parent.end_reason = 'branched'
              AND sessions.started_at >= sessions_parent.ended_at
        ))
    OR CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
        '$._reset_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL OR (EXISTS (
          SELECT *
          FROM sessions AS sessions_parent
          WHERE sessions_parent.id = sessions.parent_session_id
              AND sessions_parent.end_reason IN ('session_reset', 'session_switch', 'idle', 'daily',
                  'suspended', 'resume_pending_expired') AND sessions.session_key IS NOT NULL
              AND sessions.session_key != :empty AND sessions.session_key = sessions_parent.session_key
        )))
    AND CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
        '$._delegate_from')) COLLATE utf8mb4_unicode_ci END IS NULL AND sessions.hidden = 0
    AND (EXISTS (
      SELECT *
      FROM chain AS id_chain
      WHERE id_chain.root_id = sessions.id AND lower(id_chain.cur_id) LIKE :id_pattern ESCAPE '!'
    ))
ORDER BY _effective_last_active DESC, sessions.started_at DESC, sessions.id DESC
LIMIT :offset, :limit;
