-- statements.insert_turn_lease(dialect_name='mysql'), sent by claim_next_handoffs(limit, exclude=ids, turn_gateway=gateway)
-- MariaDB 10.11 (PyMySQL): step 5 of 9, once per conversation, in key order.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation, :lease_holder, :now, :lease_until)
ON DUPLICATE KEY UPDATE conversation_id = VALUES(conversation_id);
