-- statements.get_messages(), sent by export_session_lineage(session_id)
-- PostgreSQL (psycopg): step 4 of 4, per segment of the lineage: the row, then the transcript.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
ORDER BY messages.id;
