-- statements.release_turn_lease(), sent by release_session_turn_leases(turn_holders)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2, once per session.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
