-- statements.recent_failed_events(), sent by recent_handoff_failures(limit=limit)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

SELECT handoff_events.id, handoff_events.session_id, handoff_events.from_state, handoff_events.at,
    handoff_events.actor, handoff_events.attempt, handoff_events.detail
FROM handoff_events
WHERE handoff_events.to_state = 'failed'
ORDER BY handoff_events.id DESC
LIMIT :limit;
