-- statements.get_meta(), sent by get_meta(key)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT state_meta.value
FROM state_meta
WHERE state_meta.key = :key::VARCHAR;
