-- statements.count_rewind(), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- SQLite (pysqlite): step 1 of 8, the session must exist.
-- Parameters the statement carries: :coalesce_1 = 0, :coalesce_2 = 1.

UPDATE sessions
SET rewind_count=(coalesce(sessions.rewind_count, :coalesce_1) + :coalesce_2)
WHERE sessions.id = :session_id AND (sessions.ended_at IS NULL OR sessions.end_reason IS NULL
    OR sessions.end_reason != 'compression');
