-- statements.lineage_guard(), sent by list_prune_candidates(older_than_days, whole_lineages=True)
-- PostgreSQL (psycopg): step 3 of 3, per session continuing one that compression ended.

WITH RECURSIVE prune_up(id) AS (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id = :session_id::VARCHAR
  UNION
  SELECT up_parent.id AS id
  FROM prune_up
  JOIN sessions AS up_child ON up_child.id = prune_up.id
  JOIN sessions AS up_parent ON up_parent.id = up_child.parent_session_id
  WHERE up_parent.end_reason = 'compression' AND CASE WHEN (up_child.source = 'tool'
      OR substring(up_child.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
      AND substring(up_child.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = up_child.parent_session_id
      OR substring(up_child.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
      AND substring(up_child.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = up_child.parent_session_id
      OR substring(up_child.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
      AND substring(up_child.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = up_child.parent_session_id) THEN 1 ELSE 0 END = 0
)
SELECT prune_up.id, coalesce(up_segment.pinned, 0) AS pinned, (
  SELECT 1
  WHERE EXISTS (
    SELECT *
    FROM session_turn_leases, prune_up
    WHERE session_turn_leases.conversation_id = prune_up.id
        AND session_turn_leases.expires_at > :now
  )
) AS leased
FROM prune_up
LEFT OUTER JOIN sessions AS up_segment ON up_segment.id = prune_up.id;
