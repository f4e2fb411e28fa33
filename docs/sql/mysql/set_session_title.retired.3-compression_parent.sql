-- statements.compression_parent(), sent by set_session_title(session_id, 'Bot Chat'), the title held by an archived session, the claimant or the holder hidden
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 5, once, and once more per step up the session's compression lineage.

SELECT parent.id
FROM sessions AS child INNER
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.id = :session_id AND parent.end_reason = 'compression';
