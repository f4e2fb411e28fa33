-- statements.get_messages(visibility=Visibility.LIVE), sent by get_messages_as_conversation(session_id, include_ancestors=True)
-- PostgreSQL (psycopg): step 2 of 2, once per session of the lineage.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
ORDER BY messages.id;
