-- statements.get_transcripts(array=True), sent by get_transcripts(session_ids)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT *
FROM messages
WHERE messages.session_id = ANY (:ids::VARCHAR[]) AND messages.active = 1
ORDER BY messages.session_id, messages.id;
