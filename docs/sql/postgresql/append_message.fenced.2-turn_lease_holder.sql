-- statements.turn_lease_holder(), sent by append_message(session_id, role, content, turn_lease_holder=holder)
-- PostgreSQL (psycopg): step 2 of 5, another holder, or none: nothing is written.

SELECT session_turn_leases.holder, session_turn_leases.expires_at
FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation::VARCHAR
FOR UPDATE;
