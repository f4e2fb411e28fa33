-- statements.lineage_parent(), sent by append_message(session_id, role, content, turn_lease_holder=holder)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 5, once, and once more per step up the session's compression lineage.

SELECT parent.id
FROM sessions AS child INNER
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.id = :session_id AND parent.end_reason = 'compression'
    AND CASE WHEN (child.source = 'tool'
        OR CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
            '$._branched_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL
        AND CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
            '$._branched_from')) COLLATE utf8mb4_unicode_ci END = child.parent_session_id
        OR CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
            '$._delegate_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL
        AND CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
            '$._delegate_from')) COLLATE utf8mb4_unicode_ci END = child.parent_session_id
        OR CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
            '$._reset_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL
        AND CASE WHEN JSON_VALID(child.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(child.model_config,
            '$._reset_from')) COLLATE utf8mb4_unicode_ci END = child.parent_session_id) THEN 1 ELSE 0 END = 0;
