-- statements.rewind_from(), sent by rewind_to_message(session_id, target_message_id)
-- PostgreSQL (psycopg): step 3 of 7.
-- Parameters the statement carries: :active = 0.

UPDATE messages
SET active=:active::INTEGER
WHERE messages.session_id = :rewound_session::VARCHAR AND messages.active = 1
    AND messages.id >= :message_id::INTEGER;
