-- statements.set_meta(dialect_name='mysql'), sent by set_meta(key, value)
-- MariaDB 10.11 (PyMySQL): the operation's one statement.

INSERT INTO state_meta (`key`, value)
VALUES (:key, :value)
ON DUPLICATE KEY UPDATE value = VALUES(value);
