-- statements.prune_window(), sent by prune_sessions(older_than_days)
-- SQLite (pysqlite): step 1 of 10, once per batch (100 sessions), each resuming after the last id the one before read.
-- Parameters the statement carries: :param_1 = 0.

SELECT count(*) AS seen, max(prune_window.id) AS upto
FROM (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id > :after
  ORDER BY sessions.id
  LIMIT :scan
  OFFSET :param_1
) AS prune_window;
