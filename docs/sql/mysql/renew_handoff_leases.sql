-- statements.renew_lease(), sent by renew_handoff_leases(session_ids)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement, once per session.

UPDATE sessions
SET handoff_lease_expires_at=:lease_expires_at
WHERE sessions.id = :session_id AND sessions.handoff_state = 'running'
    AND sessions.handoff_owner = :owner;
