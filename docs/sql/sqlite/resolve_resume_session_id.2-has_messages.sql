-- statements.has_messages(), sent by resolve_resume_session_id(session_id)
-- SQLite (pysqlite): step 2 of 2, once per step from the tip down (at most 32).

SELECT min(messages.id) AS first
FROM messages
WHERE messages.session_id = :session_id;
