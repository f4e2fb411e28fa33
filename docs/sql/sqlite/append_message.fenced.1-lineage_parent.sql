-- statements.lineage_parent(), sent by append_message(session_id, role, content, turn_lease_holder=holder)
-- SQLite (pysqlite): step 1 of 5, once, and once more per step up the session's compression lineage.

SELECT parent.id
FROM sessions AS child
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.id = :session_id AND parent.end_reason = 'compression'
    AND CASE WHEN (child.source = 'tool'
        OR CASE WHEN json_valid(child.model_config) THEN json_extract(child.model_config,
            '$._branched_from') END IS NOT NULL
        AND CASE WHEN json_valid(child.model_config) THEN json_extract(child.model_config,
            '$._branched_from') END = child.parent_session_id
        OR CASE WHEN json_valid(child.model_config) THEN json_extract(child.model_config,
            '$._delegate_from') END IS NOT NULL
        AND CASE WHEN json_valid(child.model_config) THEN json_extract(child.model_config,
            '$._delegate_from') END = child.parent_session_id
        OR CASE WHEN json_valid(child.model_config) THEN json_extract(child.model_config,
            '$._reset_from') END IS NOT NULL
        AND CASE WHEN json_valid(child.model_config) THEN json_extract(child.model_config,
            '$._reset_from') END = child.parent_session_id) THEN 1 ELSE 0 END = 0;
