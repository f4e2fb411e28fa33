-- statements.get_messages(), sent by export_all()
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 2, once per session.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1
ORDER BY messages.id;
