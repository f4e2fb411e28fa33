-- statements.get_messages(), sent by get_transcripts(session_ids)
-- SQLite (pysqlite): the operation's one statement, once per session.

SELECT *
FROM messages
WHERE messages.session_id = :session_id AND messages.active = 1
ORDER BY messages.id;
