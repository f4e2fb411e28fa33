-- statements.delete_messages(before_timestamp=True), sent by clear_session_messages(session_id, before_timestamp=when)
-- PostgreSQL (psycopg): step 2 of 5.

DELETE FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.timestamp < :before;
