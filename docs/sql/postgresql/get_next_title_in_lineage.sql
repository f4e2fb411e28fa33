-- statements.lineage(), sent by get_next_title_in_lineage(base_title)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT sessions.id, sessions.title, sessions.started_at
FROM sessions
WHERE sessions.title = :base::VARCHAR OR sessions.title LIKE :pattern::VARCHAR ESCAPE '/'
ORDER BY sessions.started_at DESC, sessions.id DESC;
