-- statements.release_turn_lease(), sent by finish_handoffs(outcomes, release_turns=holders), after the store claimed them
-- SQLite (pysqlite): step 4 of 4, once per lease given back.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
