-- statements.expire_turn_lease(), sent by claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)
-- SQLite (pysqlite): step 4 of 9, once per conversation, in key order.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation AND session_turn_leases.expires_at <= :now;
