-- statements.compression_chains(dialect='postgresql'), sent by list_sessions_rich()
-- PostgreSQL (psycopg): step 2 of 3, when the page holds compressed conversations: their chains, then their tips.
-- Parameters the statement carries: :empty = '', :param_1 = 1.

WITH RECURSIVE walk(root_id, cur_id, depth) AS (
  SELECT sessions.id AS root_id, sessions.id AS cur_id, 0 AS depth
  FROM sessions
  WHERE sessions.id = ANY (:ids::VARCHAR[])
  UNION ALL
  SELECT walk.root_id AS root_id, (
    SELECT child.id
    FROM sessions AS parent
    JOIN sessions AS child ON child.parent_session_id = parent.id
        AND parent.end_reason = 'compression'
        AND substring(child.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NULL
        AND substring(child.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NULL
        AND NOT (substring(child.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
            OR (EXISTS (
              SELECT *
              FROM sessions AS child_parent
              WHERE child_parent.id = child.parent_session_id
                  AND child_parent.end_reason IN ('session_reset', 'session_switch', 'idle',
                      'daily', 'suspended', 'resume_pending_expired')
                  AND child.session_key IS NOT NULL AND child.session_key != :empty::VARCHAR
                  AND child.session_key = child_parent.session_key
            ))) AND coalesce(child.source, :empty::VARCHAR) != 'tool'
    WHERE parent.id = walk.cur_id
    ORDER BY CASE WHEN (child.end_reason = 'compression') THEN 0 WHEN (child.ended_at IS NULL) THEN 1 ELSE 2 END,
        coalesce(coalesce(greatest(CASE WHEN (child.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN child.last_activity_at END,
            (
              SELECT max(child_newest.timestamp) AS max_1
              FROM messages AS child_newest
              WHERE child_newest.session_id = child.id AND child_newest.timestamp BETWEEN 0.0
                  AND 4102444800.0
            )),
            CASE WHEN (child.last_activity_at BETWEEN 0.0 AND 4102444800.0) THEN child.last_activity_at END,
            (
              SELECT max(child_newest.timestamp) AS max_1
              FROM messages AS child_newest
              WHERE child_newest.session_id = child.id AND child_newest.timestamp BETWEEN 0.0
                  AND 4102444800.0
            )), CASE WHEN (child.started_at BETWEEN 0.0 AND 4102444800.0) THEN child.started_at END) DESC,
        child.started_at DESC, child.id DESC
    LIMIT :param_1::INTEGER
  ) AS anon_1, walk.depth + 1 AS anon_2
  FROM walk
  WHERE walk.cur_id IS NOT NULL AND walk.depth < 100
)
SELECT walk.root_id, walk.cur_id
FROM walk
WHERE walk.cur_id IS NOT NULL
ORDER BY walk.root_id, walk.depth;
