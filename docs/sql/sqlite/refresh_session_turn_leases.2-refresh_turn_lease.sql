-- statements.refresh_turn_lease(), sent by refresh_session_turn_leases(turn_holders)
-- SQLite (pysqlite): step 2 of 2, once per session.

UPDATE session_turn_leases
SET expires_at=:lease_until
WHERE session_turn_leases.conversation_id = :conversation
    AND session_turn_leases.holder = :lease_holder;
