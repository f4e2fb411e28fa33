-- statements.delete_session_turn_lease(), sent by prune_sessions(older_than_days)
-- SQLite (pysqlite): step 8 of 10, once per session deleted.

DELETE FROM session_turn_leases
WHERE session_turn_leases.conversation_id = :session_id;
