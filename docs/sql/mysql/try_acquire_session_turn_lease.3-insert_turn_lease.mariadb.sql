-- statements.insert_turn_lease(dialect_name='mysql'), sent by try_acquire_session_turn_lease(session_id, holder)
-- MariaDB 10.11 (PyMySQL): step 3 of 4.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation, :lease_holder, :now, :lease_until)
ON DUPLICATE KEY UPDATE conversation_id = VALUES(conversation_id);
