-- statements.prune_window(), sent by prune_report(older_than_days, dry_run=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 4, once per batch (100 sessions), each resuming after the last id the one before read.

SELECT count(*) AS seen, max(prune_window.id) AS upto
FROM (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id > :after
  ORDER BY sessions.id
  LIMIT :scan
) AS prune_window;
