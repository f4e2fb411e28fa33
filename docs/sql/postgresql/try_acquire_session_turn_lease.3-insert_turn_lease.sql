-- statements.insert_turn_lease(dialect_name='postgresql'), sent by try_acquire_session_turn_lease(session_id, holder)
-- PostgreSQL (psycopg): step 3 of 4.

INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at)
VALUES (:conversation::VARCHAR, :lease_holder::VARCHAR, :now, :lease_until)
ON CONFLICT (conversation_id) DO NOTHING;
