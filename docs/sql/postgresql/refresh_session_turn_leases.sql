-- statements.refresh_turn_leases(), sent by refresh_session_turn_leases(turn_holders)
-- PostgreSQL (psycopg): the operation's one statement.

WITH RECURSIVE given AS (
  SELECT anon_1.id AS id, anon_1.holder AS holder
  FROM unnest(:ids::VARCHAR[], :holders::VARCHAR[]) AS anon_1(id, holder)
),
lineage(start, node, up, depth, path, forked) AS (
  SELECT CAST(given.id AS VARCHAR(255)) AS start, CAST(given.id AS VARCHAR(255)) AS node,
      lineage_first.parent_session_id AS up, 0 AS depth,
      CAST(ARRAY[CAST(given.id AS VARCHAR(255))] AS VARCHAR[]) AS path,
      CASE WHEN (lineage_first.source = 'tool'
          OR substring(lineage_first.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_first.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = lineage_first.parent_session_id
          OR substring(lineage_first.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_first.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = lineage_first.parent_session_id
          OR substring(lineage_first.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_first.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = lineage_first.parent_session_id) THEN 1 ELSE 0 END AS forked
  FROM given
  LEFT OUTER JOIN sessions AS lineage_first ON lineage_first.id = given.id
  UNION ALL
  SELECT lineage.start AS start, lineage_parent.id AS id,
      lineage_parent.parent_session_id AS parent_session_id, lineage.depth + 1 AS anon_2,
      array_append(lineage.path, lineage_parent.id) AS array_append_1,
      CASE WHEN (lineage_parent.source = 'tool'
          OR substring(lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = lineage_parent.parent_session_id
          OR substring(lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = lineage_parent.parent_session_id
          OR substring(lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = lineage_parent.parent_session_id) THEN 1 ELSE 0 END AS anon_3
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
turns AS (
  SELECT lineage_roots.id AS id, lineage_roots.conversation AS conversation, given.holder AS holder
  FROM lineage_roots
  JOIN given ON given.id = lineage_roots.id
),
refreshed AS (
  UPDATE session_turn_leases
  SET expires_at=:lease_until
  FROM turns
  WHERE session_turn_leases.conversation_id = turns.conversation
      AND session_turn_leases.holder = turns.holder
  RETURNING turns.id
)
SELECT refreshed.id
FROM refreshed;
