-- statements.count_sessions(by_source=True), sent by session_count(source)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT count(*) AS count
FROM sessions
WHERE sessions.source = :source::VARCHAR;
