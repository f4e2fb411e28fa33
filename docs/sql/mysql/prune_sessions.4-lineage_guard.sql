-- statements.lineage_guard(), sent by prune_sessions(older_than_days)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 4 of 10, per session continuing one that compression ended.

WITH RECURSIVE prune_up(id) AS (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id = :session_id
  UNION
  SELECT up_parent.id AS id
  FROM prune_up INNER
  JOIN sessions AS up_child ON up_child.id = prune_up.id INNER
  JOIN sessions AS up_parent ON up_parent.id = up_child.parent_session_id
  WHERE up_parent.end_reason = 'compression' AND CASE WHEN (up_child.source = 'tool'
      OR CASE WHEN JSON_VALID(up_child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(up_child.model_config,
          '$._branched_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL
      AND CASE WHEN JSON_VALID(up_child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(up_child.model_config,
          '$._branched_from')) COLLATE utf8mb4_unicode_ci END = up_child.parent_session_id
      OR CASE WHEN JSON_VALID(up_child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(up_child.model_config,
          '$._delegate_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL
      AND CASE WHEN JSON_VALID(up_child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(up_child.model_config,
          '$._delegate_from')) COLLATE utf8mb4_unicode_ci END = up_child.parent_session_id
      OR CASE WHEN JSON_VALID(up_child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(up_child.model_config,
          '$._reset_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL
      AND CASE WHEN JSON_VALID(up_child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(up_child.model_config,
          '$._reset_from')) COLLATE utf8mb4_unicode_ci END = up_child.parent_session_id) THEN 1 ELSE 0 END = 0
)
SELECT prune_up.id, coalesce(up_segment.pinned, 0) AS pinned, (
  SELECT 1
  FROM DUAL
  WHERE EXISTS (
    SELECT *
    FROM session_turn_leases, prune_up
    WHERE session_turn_leases.conversation_id = prune_up.id
        AND session_turn_leases.expires_at > :now
  )
) AS leased
FROM prune_up
LEFT OUTER JOIN sessions AS up_segment ON up_segment.id = prune_up.id;
