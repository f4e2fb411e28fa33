-- statements.prune_batch(dialect='postgresql', chosen=PruneFilter(names=('last_active_before',), archived=None, include_pinned=False, lineage_tips_only=False), counted=False), sent by prune_sessions(older_than_days)
-- PostgreSQL (psycopg): step 2 of 10, once per batch, in its window.

SELECT s.id, s.end_reason, (
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
    AND coalesce(s.pinned, 0) = 0 AND s.id > :after::VARCHAR AND s.id <= :upto::VARCHAR
ORDER BY s.id
FOR UPDATE;
