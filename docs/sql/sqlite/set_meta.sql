-- statements.set_meta(dialect_name='sqlite'), sent by set_meta(key, value)
-- SQLite (pysqlite): the operation's one statement.

INSERT INTO state_meta ("key", value)
VALUES (:key, :value)
ON CONFLICT ("key") DO UPDATE
SET value = excluded.value;
