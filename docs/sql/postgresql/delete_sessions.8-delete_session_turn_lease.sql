-- statements.delete_session_turn_lease(), sent by delete_sessions(session_ids)
-- PostgreSQL (psycopg): step 8 of 10, once per session deleted (with its delegate runs).

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :session_id::VARCHAR;
