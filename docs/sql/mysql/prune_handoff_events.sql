-- statements.prune_events(), sent by prune_handoff_events(older_than_seconds)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

DELETE FROM handoff_events
WHERE handoff_events.at < :before;
