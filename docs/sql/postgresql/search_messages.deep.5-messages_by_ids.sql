-- statements.messages_by_ids(dialect='postgresql'), sent by search_messages('common', limit=5, offset=1005)
-- PostgreSQL (psycopg): step 5 of 5.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id = ANY (:ids::INTEGER[]);
