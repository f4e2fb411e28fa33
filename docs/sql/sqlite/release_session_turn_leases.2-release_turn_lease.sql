-- statements.release_turn_lease(), sent by release_session_turn_leases(turn_holders)
-- SQLite (pysqlite): step 2 of 2, once per session.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
