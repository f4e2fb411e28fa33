-- statements.expire_turn_lease(), sent by claim_handoffs(session_ids, turn_holders=holders)
-- SQLite (pysqlite): step 3 of 8, once per conversation, in key order.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation AND session_turn_leases.expires_at <= :now;
