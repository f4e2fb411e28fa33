-- statements.release_turn_lease(), sent by release_session_turn_lease(session_id, holder)
-- SQLite (pysqlite): step 2 of 2.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
