-- statements.refresh_turn_lease(), sent by refresh_session_turn_leases(turn_holders)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2, once per session.

UPDATE session_turn_leases
SET expires_at=:lease_until
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
