-- statements.lineage_parent(), sent by append_messages_batch(session_id, messages, turn_lease_holder=holder)
-- PostgreSQL (psycopg): step 1 of 5, once, and once more per step up the session's compression lineage.

SELECT parent.id
FROM sessions AS child
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.id = :session_id::VARCHAR AND parent.end_reason = 'compression'
    AND CASE WHEN (child.source = 'tool'
        OR substring(child.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
        AND substring(child.model_config from '"_branched_from"\s*:\s*"([^"]*)"') = child.parent_session_id
        OR substring(child.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NOT NULL
        AND substring(child.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') = child.parent_session_id
        OR substring(child.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
        AND substring(child.model_config from '"_reset_from"\s*:\s*"([^"]*)"') = child.parent_session_id) THEN 1 ELSE 0 END = 0;
