-- statements.release_turn_leases(), sent by release_session_turn_leases(turn_holders)
-- PostgreSQL (psycopg): the operation's one statement.

WITH RECURSIVE release_given AS (
  SELECT anon_1.id AS id, anon_1.holder AS holder
  FROM unnest(:release_ids::VARCHAR[], :release_holders::VARCHAR[]) AS anon_1(id, holder)
),
release_lineage(start, node, up, depth, path, forked) AS (
  SELECT CAST(release_given.id AS VARCHAR(255)) AS start,
      CAST(release_given.id AS VARCHAR(255)) AS node, release_lineage_first.parent_session_id AS up,
      0 AS depth, CAST(ARRAY[CAST(release_given.id AS VARCHAR(255))] AS VARCHAR[]) AS path,
      CASE WHEN (release_lineage_first.source = 'tool'
          OR substring(release_lineage_first.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_first.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = release_lineage_first.parent_session_id
          OR substring(release_lineage_first.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_first.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = release_lineage_first.parent_session_id
          OR substring(release_lineage_first.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_first.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = release_lineage_first.parent_session_id) THEN 1 ELSE 0 END AS forked
  FROM release_given
  LEFT OUTER JOIN sessions AS release_lineage_first ON release_lineage_first.id = release_given.id
  UNION ALL
  SELECT release_lineage.start AS start, release_lineage_parent.id AS id,
      release_lineage_parent.parent_session_id AS parent_session_id,
      release_lineage.depth + 1 AS anon_2, array_append(release_lineage.path,
          release_lineage_parent.id) AS array_append_1,
      CASE WHEN (release_lineage_parent.source = 'tool'
          OR substring(release_lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = release_lineage_parent.parent_session_id
          OR substring(release_lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = release_lineage_parent.parent_session_id
          OR substring(release_lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = release_lineage_parent.parent_session_id) THEN 1 ELSE 0 END AS anon_3
  FROM release_lineage
  JOIN sessions AS release_lineage_parent ON release_lineage_parent.id = release_lineage.up
  WHERE release_lineage_parent.end_reason = 'compression' AND release_lineage.depth < 100
      AND release_lineage.forked = 0 AND release_lineage_parent.id != ALL (release_lineage.path)
),
release_lineage_roots AS (
  SELECT DISTINCT ON (release_lineage.start) release_lineage.start AS id,
      release_lineage.node AS conversation
  FROM release_lineage
  ORDER BY release_lineage.start, release_lineage.depth DESC
),
release_turns AS (
  SELECT release_lineage_roots.id AS id, release_lineage_roots.conversation AS conversation,
      release_given.holder AS holder
  FROM release_lineage_roots
  JOIN release_given ON release_given.id = release_lineage_roots.id
),
released AS (
  DELETE FROM session_turn_leases USING release_turns
  WHERE session_turn_leases.conversation_id = release_turns.conversation
      AND session_turn_leases.holder = release_turns.holder
  RETURNING session_turn_leases.conversation_id
)
SELECT count(*) AS released
FROM released;
