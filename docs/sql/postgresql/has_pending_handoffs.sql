-- statements.has_pending_handoffs(), sent by has_pending_handoffs()
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :param_1 = 1.

SELECT 1
FROM sessions
WHERE sessions.handoff_state = 'pending'
LIMIT :param_1::INTEGER;
