-- statements.finish_claims_json(fenced=True).apply, sent by finish_handoffs(outcomes), after the store claimed them
-- SQLite (pysqlite): step 2 of 2.
-- Parameters the statement carries: :handoff_lease_expires_at = NULL, :json_extract_1 = '$[0]', :json_extract_2 = '$[1]'.

UPDATE sessions
SET handoff_state=CASE WHEN (claims.error IS NULL) THEN 'completed' ELSE 'failed' END,
    handoff_error=claims.error, handoff_finished_at=:now,
    handoff_lease_expires_at=:handoff_lease_expires_at
FROM (
  SELECT claims."key" AS id, json_extract(claims.value, :json_extract_1) AS attempt,
      json_extract(claims.value, :json_extract_2) AS error
  FROM json_each(:claims) AS claims
) AS claims
WHERE sessions.id = claims.id AND (+ sessions.handoff_state) = 'running'
    AND sessions.handoff_owner = :owner AND (claims.attempt IS NULL
        OR sessions.handoff_attempt = claims.attempt)
RETURNING id;
