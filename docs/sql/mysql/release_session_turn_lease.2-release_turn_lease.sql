-- statements.release_turn_lease(), sent by release_session_turn_lease(session_id, holder)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
