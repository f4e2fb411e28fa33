-- statements.insert_turn_lease(dialect_name='sqlite'), sent by claim_handoffs(session_ids, turn_holders=holders)
-- SQLite (pysqlite): step 4 of 8, once per conversation, in key order.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation, :lease_holder, :now, :lease_until)
ON CONFLICT (conversation_id) DO NOTHING;
