-- statements.turn_lease_holder(), sent by claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)
-- SQLite (pysqlite): step 6 of 9, once per conversation, in key order.

SELECT session_turn_leases.holder, session_turn_leases.expires_at
FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation;
