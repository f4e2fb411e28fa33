-- statements.some_sessions(), sent by session_count_ge(n)
-- SQLite (pysqlite): the operation's one statement.
-- Parameters the statement carries: :param_1 = 0.

SELECT 1 AS one
FROM sessions
LIMIT :limit
OFFSET :param_1;
