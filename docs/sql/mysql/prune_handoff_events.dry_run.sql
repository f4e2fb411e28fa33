-- statements.count_events_before(), sent by prune_handoff_events(older_than_seconds, dry_run=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT count(*) AS count
FROM handoff_events
WHERE handoff_events.at < :before;
