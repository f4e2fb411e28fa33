-- statements.messages_by_ids(dialect='postgresql'), sent by search_messages('广西 OR 桂林')
-- PostgreSQL (psycopg): step 3 of 3.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id = ANY (:ids::INTEGER[]);
