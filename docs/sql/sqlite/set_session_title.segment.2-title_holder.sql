-- statements.title_holder(), sent by set_session_title(session_id, title), the title held by an earlier compression segment of the session
-- SQLite (pysqlite): step 2 of 5, when a title is given: another session holding it.

SELECT sessions.id, sessions.archived, sessions.hidden
FROM sessions
WHERE sessions.title = :title AND sessions.id != :session_id;
