-- statements.insert_turn_lease(dialect_name='mysql'), sent by try_acquire_session_turn_lease(session_id, holder)
-- MySQL 8.0 (PyMySQL): step 3 of 4.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation, :lease_holder, :now, :lease_until) AS new
ON DUPLICATE KEY UPDATE conversation_id = new.conversation_id;
