-- statements.set_meta(dialect_name='mysql'), sent by set_meta(key, value)
-- MySQL 8.0 (PyMySQL): the operation's one statement.

INSERT INTO state_meta (`key`, value)
VALUES (:key, :value) AS new
ON DUPLICATE KEY UPDATE value = new.value;
