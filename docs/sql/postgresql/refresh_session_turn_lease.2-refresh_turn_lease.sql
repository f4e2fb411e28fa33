-- statements.refresh_turn_lease(), sent by refresh_session_turn_lease(session_id, holder)
-- PostgreSQL (psycopg): step 2 of 2.

UPDATE session_turn_leases
SET expires_at=:lease_until
WHERE session_turn_leases.conversation_id = :conversation::VARCHAR
    AND session_turn_leases.holder = :lease_holder::VARCHAR;
