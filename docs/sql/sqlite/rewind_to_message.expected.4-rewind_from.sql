-- statements.rewind_from(), sent by rewind_to_message(session_id, target_message_id, expected_active_ids=ids)
-- SQLite (pysqlite): step 4 of 8.
-- Parameters the statement carries: :active = 0.

UPDATE messages
SET active=:active
WHERE messages.session_id = :rewound_session AND messages.active = 1 AND messages.id >= :message_id;
