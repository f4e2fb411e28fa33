-- statements.insert_turn_lease(dialect_name='sqlite'), sent by claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)
-- SQLite (pysqlite): step 5 of 9, once per conversation, in key order.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation, :lease_holder, :now, :lease_until)
ON CONFLICT (conversation_id) DO NOTHING;
