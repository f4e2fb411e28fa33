-- statements.recent_failures(), sent by handoff_stats()
-- PostgreSQL (psycopg): step 5 of 5.

SELECT handoff_events.detail AS error, count(*) AS count
FROM handoff_events
WHERE handoff_events.to_state = 'failed' AND handoff_events.at >= :since
GROUP BY handoff_events.detail
ORDER BY count(*) DESC, handoff_events.detail
LIMIT :limit;
