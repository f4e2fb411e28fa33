-- statements.some_sessions(), sent by session_count_ge(n)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT 1 AS one
FROM sessions
LIMIT :limit;
