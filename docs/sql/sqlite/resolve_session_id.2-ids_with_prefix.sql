-- statements.ids_with_prefix(ranged=True), sent by resolve_session_id(session_id_or_prefix)
-- SQLite (pysqlite): step 2 of 2, when no session has exactly this id.
-- Parameters the statement carries: :param_1 = 0.

SELECT sessions.id
FROM sessions
WHERE sessions.id LIKE :pattern ESCAPE '/' AND sessions.id >= :low AND sessions.id < :high
ORDER BY sessions.started_at DESC, sessions.id DESC
LIMIT :limit
OFFSET :param_1;
