-- statements.release_turn_lease(), sent by finish_handoffs(outcomes, release_turns=holders), after the store claimed them
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 6 of 6, once per lease given back.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
