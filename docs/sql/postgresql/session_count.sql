-- statements.count_sessions(by_source=False), sent by session_count()
-- PostgreSQL (psycopg): the operation's one statement.

SELECT count(*) AS count
FROM sessions;
