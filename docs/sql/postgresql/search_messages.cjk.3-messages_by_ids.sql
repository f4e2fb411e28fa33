-- statements.messages_by_ids(dialect='postgresql'), sent by search_messages('大别山项目', source_filter=[...], exclude_sources=[...], role_filter=[...], sort='newest')
-- PostgreSQL (psycopg): step 3 of 3.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id = ANY (:ids::INTEGER[]);
