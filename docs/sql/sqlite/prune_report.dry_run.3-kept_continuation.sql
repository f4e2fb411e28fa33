-- statements.kept_continuation(dialect='sqlite', chosen=PruneFilter(names=('last_active_before',), archived=None, include_pinned=False, lineage_tips_only=False)), sent by prune_report(older_than_days, dry_run=True)
-- SQLite (pysqlite): step 3 of 4, per session compression ended.
-- Parameters the statement carries: :param_1 = 0.

WITH RECURSIVE prune_down(id) AS (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id = :session_id
  UNION
  SELECT down_child.id AS id
  FROM prune_down
  JOIN sessions AS down_parent ON down_parent.id = prune_down.id
  JOIN sessions AS down_child ON down_child.parent_session_id = down_parent.id
  WHERE down_parent.end_reason = 'compression' AND CASE WHEN (down_child.source = 'tool'
      OR CASE WHEN json_valid(down_child.model_config) THEN json_extract(down_child.model_config,
          '$._branched_from') END IS NOT NULL
      AND CASE WHEN json_valid(down_child.model_config) THEN json_extract(down_child.model_config,
          '$._branched_from') END = down_child.parent_session_id
      OR CASE WHEN json_valid(down_child.model_config) THEN json_extract(down_child.model_config,
          '$._delegate_from') END IS NOT NULL
      AND CASE WHEN json_valid(down_child.model_config) THEN json_extract(down_child.model_config,
          '$._delegate_from') END = down_child.parent_session_id
      OR CASE WHEN json_valid(down_child.model_config) THEN json_extract(down_child.model_config,
          '$._reset_from') END IS NOT NULL
      AND CASE WHEN json_valid(down_child.model_config) THEN json_extract(down_child.model_config,
          '$._reset_from') END = down_child.parent_session_id) THEN 1 ELSE 0 END = 0
)
SELECT s.id
FROM prune_down
JOIN sessions AS s ON s.id = prune_down.id
WHERE s.id != :session_id AND NOT (s.ended_at IS NOT NULL
    AND coalesce(s.handoff_state, '') != 'pending' AND coalesce(s.handoff_state, '') != 'running'
    AND NOT (EXISTS (
      SELECT *
      FROM session_turn_leases
      WHERE session_turn_leases.conversation_id = s.id AND session_turn_leases.expires_at > :now
    ))
    AND coalesce(coalesce(max(CASE WHEN (s.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN s.last_activity_at END,
        (
          SELECT max(s_newest.timestamp) AS max_1
          FROM messages AS s_newest
          WHERE s_newest.session_id = s.id AND s_newest.timestamp BETWEEN 0.0 AND 4102444800.0
        )), CASE WHEN (s.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN s.last_activity_at END,
        (
          SELECT max(s_newest.timestamp) AS max_1
          FROM messages AS s_newest
          WHERE s_newest.session_id = s.id AND s_newest.timestamp BETWEEN 0.0 AND 4102444800.0
        )), CASE WHEN (s.started_at BETWEEN 0.0 AND 4102444800.0) THEN s.started_at END) < :last_active_before
    AND (coalesce(s.end_reason, '') != 'startup_orphan_reap' OR s.ended_at < :last_active_before)
    AND coalesce(s.pinned, 0) = 0)
LIMIT 1
OFFSET :param_1;
