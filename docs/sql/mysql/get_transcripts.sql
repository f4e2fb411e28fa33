-- statements.get_transcripts(array=False), sent by get_transcripts(session_ids)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.
-- :ids is a list: one parameter per item.

SELECT *
FROM messages
WHERE messages.session_id IN (:ids) AND messages.active = 1
ORDER BY messages.session_id, messages.id;
