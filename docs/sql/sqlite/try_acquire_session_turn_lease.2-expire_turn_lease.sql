-- statements.expire_turn_lease(), sent by try_acquire_session_turn_lease(session_id, holder)
-- SQLite (pysqlite): step 2 of 4.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation AND session_turn_leases.expires_at <= :now;
