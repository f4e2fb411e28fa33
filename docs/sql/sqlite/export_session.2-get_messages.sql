-- statements.get_messages(), sent by export_session(session_id)
-- SQLite (pysqlite): step 2 of 2.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1
ORDER BY messages.id;
