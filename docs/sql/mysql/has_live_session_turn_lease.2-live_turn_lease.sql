-- statements.live_turn_lease(), sent by has_live_session_turn_lease(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2.

SELECT session_turn_leases.holder, session_turn_leases.expires_at
FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation AND session_turn_leases.expires_at > :now;
