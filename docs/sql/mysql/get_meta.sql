-- statements.get_meta(), sent by get_meta(key)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT state_meta.value
FROM state_meta
WHERE state_meta.`key` = :key;
