-- statements.get_messages(), sent by export_all()
-- PostgreSQL (psycopg): step 2 of 2, once per session.

SELECT *
FROM messages
WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
ORDER BY messages.id;
