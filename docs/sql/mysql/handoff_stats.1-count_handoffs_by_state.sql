-- statements.count_handoffs_by_state(), sent by handoff_stats()
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 5.

SELECT sessions.handoff_state AS state, count(*) AS count
FROM sessions
WHERE sessions.handoff_state IS NOT NULL
GROUP BY sessions.handoff_state;
