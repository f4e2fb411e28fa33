-- statements.renew_leases_json(), sent by renew_handoff_leases(session_ids)
-- SQLite (pysqlite): the operation's one statement.

UPDATE sessions
SET handoff_lease_expires_at=:lease_expires_at
WHERE sessions.id IN (
  SELECT ids.value
  FROM json_each(:ids) AS ids
) AND (+ sessions.handoff_state) = 'running' AND sessions.handoff_owner = :owner
RETURNING id;
