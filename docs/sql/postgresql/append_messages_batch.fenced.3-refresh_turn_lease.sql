-- statements.refresh_turn_lease(), sent by append_messages_batch(session_id, messages, turn_lease_holder=holder)
-- PostgreSQL (psycopg): step 3 of 5, when the holder's own lease expired.

UPDATE session_turn_leases
SET expires_at=:lease_until
WHERE session_turn_leases.conversation_id = :conversation::VARCHAR
    AND session_turn_leases.holder = :lease_holder::VARCHAR;
