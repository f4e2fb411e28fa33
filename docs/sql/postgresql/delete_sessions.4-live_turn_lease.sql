-- statements.live_turn_lease(), sent by delete_sessions(session_ids)
-- PostgreSQL (psycopg): step 4 of 10, once per session deleted and conversation of one.

SELECT session_turn_leases.holder, session_turn_leases.expires_at
FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation::VARCHAR
    AND session_turn_leases.expires_at > :now;
