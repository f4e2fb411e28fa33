-- statements.turn_lease_holder(), sent by claim_handoffs(session_ids, turn_holders=holders)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 5 of 8, once per conversation, in key order.

SELECT session_turn_leases.holder, session_turn_leases.expires_at
FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation
FOR UPDATE;
