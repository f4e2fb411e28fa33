-- statements.insert_turn_lease(dialect_name='sqlite'), sent by try_acquire_session_turn_lease(session_id, holder)
-- SQLite (pysqlite): step 3 of 4.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation, :lease_holder, :now, :lease_until)
ON CONFLICT (conversation_id) DO NOTHING;
