-- statements.count_rewind(), sent by rewind_to_message(session_id, target_message_id)
-- PostgreSQL (psycopg): step 1 of 7, the session must exist.
-- Parameters the statement carries: :coalesce_1 = 0, :coalesce_2 = 1.

UPDATE sessions
SET rewind_count=(coalesce(sessions.rewind_count, :coalesce_1::INTEGER) + :coalesce_2::INTEGER)
WHERE sessions.id = :session_id::VARCHAR AND (sessions.ended_at IS NULL
    OR sessions.end_reason IS NULL OR sessions.end_reason != 'compression');
