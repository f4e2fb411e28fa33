-- statements.expire_turn_lease(), sent by try_acquire_session_turn_lease(session_id, holder)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 4.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :conversation AND session_turn_leases.expires_at <= :now;
