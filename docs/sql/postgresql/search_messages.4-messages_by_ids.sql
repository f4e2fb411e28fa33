-- statements.messages_by_ids(dialect='postgresql'), sent by search_messages('deployscript')
-- PostgreSQL (psycopg): step 4 of 4.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id = ANY (:ids::INTEGER[]);
