-- statements.finish_claims_json(fenced=True).record, sent by finish_handoffs(outcomes), after the store claimed them
-- SQLite (pysqlite): step 1 of 2.
-- Parameters the statement carries: :json_extract_1 = '$[0]', :json_extract_2 = '$[1]'.

INSERT INTO handoff_events (session_id, from_state, to_state, at, actor, attempt, detail)
SELECT sessions.id, 'running',
    CASE WHEN (claims.error IS NULL) THEN 'completed' ELSE 'failed' END AS anon_1, :now AS anon_2,
    :actor AS anon_3, sessions.handoff_attempt, claims.error
FROM (
  SELECT claims."key" AS id, json_extract(claims.value, :json_extract_1) AS attempt,
      json_extract(claims.value, :json_extract_2) AS error
  FROM json_each(:claims) AS claims
) AS claims
JOIN sessions ON sessions.id = claims.id
WHERE sessions.id = claims.id AND (+ sessions.handoff_state) = 'running'
    AND sessions.handoff_owner = :owner AND (claims.attempt IS NULL
        OR sessions.handoff_attempt = claims.attempt);
