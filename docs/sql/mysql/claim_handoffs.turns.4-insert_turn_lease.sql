-- statements.insert_turn_lease(dialect_name='mysql'), sent by claim_handoffs(session_ids, turn_holders=holders)
-- MySQL 8.0 (PyMySQL): step 4 of 8, once per conversation, in key order.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation, :lease_holder, :now, :lease_until) AS new
ON DUPLICATE KEY UPDATE conversation_id = new.conversation_id;
