-- statements.turn_lease_holder(), sent by try_acquire_session_turn_lease(session_id, holder)
-- PostgreSQL (psycopg): step 4 of 4.

SELECT session_turn_leases.holder, session_turn_leases.expires_at
FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation::VARCHAR
FOR UPDATE;
