-- statements.set_meta(dialect_name='postgresql'), sent by set_meta(key, value)
-- PostgreSQL (psycopg): the operation's one statement.

INSERT INTO state_meta (key, value)
VALUES (:key::VARCHAR, :value::VARCHAR)
ON CONFLICT (key) DO UPDATE
SET value = excluded.value;
