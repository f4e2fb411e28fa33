-- statements.finish_claims(fenced=True, release=True), sent by finish_handoffs(outcomes, release_turns=holders), after the store claimed them
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :param_1 = NULL.

WITH RECURSIVE locked AS (
  SELECT sessions.id AS id, anon_4.error AS error
  FROM sessions, unnest(:ids::VARCHAR[], :attempts::INTEGER[], :errors::TEXT[]) AS anon_4(id,
      attempt, error)
  WHERE sessions.id = anon_4.id AND sessions.handoff_state = 'running'
      AND sessions.handoff_owner = :owner::VARCHAR AND (anon_4.attempt IS NULL
          OR sessions.handoff_attempt = anon_4.attempt)
  ORDER BY sessions.id
  FOR UPDATE OF sessions
),
moved AS (
  UPDATE sessions
  SET handoff_state=CASE WHEN (locked.error IS NULL) THEN 'completed' ELSE 'failed' END,
      handoff_error=locked.error, handoff_finished_at=:now, handoff_lease_expires_at=:param_1
  FROM locked
  WHERE sessions.id = locked.id
  RETURNING sessions.id, sessions.handoff_attempt, locked.error
),
recorded AS (
  INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
  SELECT moved.id AS id, 'running',
      CASE WHEN (moved.error IS NULL) THEN 'completed' ELSE 'failed' END AS anon_1, :now AS anon_2,
      :actor::VARCHAR AS anon_3, moved.handoff_attempt AS handoff_attempt, moved.error AS error
  FROM moved
),
release_given AS (
  SELECT anon_5.id AS id, anon_5.holder AS holder
  FROM unnest(:release_ids::VARCHAR[], :release_holders::VARCHAR[]) AS anon_5(id, holder)
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
      release_lineage.depth + 1 AS anon_6, array_append(release_lineage.path,
          release_lineage_parent.id) AS array_append_1,
      CASE WHEN (release_lineage_parent.source = 'tool'
          OR substring(release_lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_parent.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = release_lineage_parent.parent_session_id
          OR substring(release_lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_parent.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = release_lineage_parent.parent_session_id
          OR substring(release_lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
          AND substring(release_lineage_parent.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = release_lineage_parent.parent_session_id) THEN 1 ELSE 0 END AS anon_7
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
SELECT moved.id
FROM moved;
