-- statements.lineage_parent(), sent by delete_session(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 10, for the session: once, and once more per step up the session's compression lineage.

SELECT parent.id
FROM sessions AS child INNER
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.id = :session_id AND parent.end_reason = 'compression';
