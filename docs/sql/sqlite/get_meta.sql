-- statements.get_meta(), sent by get_meta(key)
-- SQLite (pysqlite): the operation's one statement.

SELECT state_meta.value
FROM state_meta
WHERE state_meta."key" = :key;
