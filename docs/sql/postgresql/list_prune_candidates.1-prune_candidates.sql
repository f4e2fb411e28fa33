-- statements.prune_candidates(dialect='postgresql', chosen=PruneFilter(names=('last_active_before',), archived=None, include_pinned=False, lineage_tips_only=False)), sent by list_prune_candidates(older_than_days, whole_lineages=True)
-- PostgreSQL (psycopg): step 1 of 3.

SELECT s.id, s.source, s.title, s.model, s.started_at, s.ended_at, s.end_reason, s.message_count,
    s.archived, s.pinned, s.input_tokens, s.output_tokens, s.tool_call_count, s.actual_cost_usd,
    s.estimated_cost_usd, s.billing_provider, s.git_branch, s.cwd, s.user_id, s.chat_id,
    s.chat_type, coalesce(coalesce(greatest(CASE WHEN (s.last_activity_at BETWEEN 0.0
        AND 4102444800.0) THEN s.last_activity_at END, (
          SELECT max(s_newest.timestamp) AS max_1
          FROM messages AS s_newest
          WHERE s_newest.session_id = s.id AND s_newest.timestamp BETWEEN 0.0 AND 4102444800.0
        )), CASE WHEN (s.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN s.last_activity_at END, (
          SELECT max(s_newest.timestamp) AS max_1
          FROM messages AS s_newest
          WHERE s_newest.session_id = s.id AND s_newest.timestamp BETWEEN 0.0 AND 4102444800.0
        )), CASE WHEN (s.started_at BETWEEN 0.0 AND 4102444800.0) THEN s.started_at END) AS last_active,
    (
      SELECT prune_parent.end_reason
      FROM sessions AS prune_parent
      WHERE prune_parent.id = s.parent_session_id
    ) AS parent_end_reason
FROM sessions AS s
WHERE s.ended_at IS NOT NULL AND coalesce(s.handoff_state, '') != 'pending'
    AND coalesce(s.handoff_state, '') != 'running' AND NOT (EXISTS (
      SELECT *
      FROM session_turn_leases
      WHERE session_turn_leases.conversation_id = s.id AND session_turn_leases.expires_at > :now
    ))
    AND coalesce(coalesce(greatest(CASE WHEN (s.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN s.last_activity_at END,
        (
          SELECT max(s_newest.timestamp) AS max_2
          FROM messages AS s_newest
          WHERE s_newest.session_id = s.id AND s_newest.timestamp BETWEEN 0.0 AND 4102444800.0
        )), CASE WHEN (s.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN s.last_activity_at END,
        (
          SELECT max(s_newest.timestamp) AS max_2
          FROM messages AS s_newest
          WHERE s_newest.session_id = s.id AND s_newest.timestamp BETWEEN 0.0 AND 4102444800.0
        )), CASE WHEN (s.started_at BETWEEN 0.0 AND 4102444800.0) THEN s.started_at END) < :last_active_before
    AND (coalesce(s.end_reason, '') != 'startup_orphan_reap' OR s.ended_at < :last_active_before)
    AND coalesce(s.pinned, 0) = 0
ORDER BY last_active, s.started_at, s.id;
