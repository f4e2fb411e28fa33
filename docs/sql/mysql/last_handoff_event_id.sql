-- statements.last_handoff_event_id(), sent by last_handoff_event_id()
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT max(handoff_events.id) AS last
FROM handoff_events;
