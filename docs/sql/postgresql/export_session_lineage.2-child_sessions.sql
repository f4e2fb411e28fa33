-- statements.child_sessions(), sent by export_session_lineage(session_id)
-- PostgreSQL (psycopg): step 2 of 4, once per compressed segment, from the root down.

SELECT child.id, child.parent_session_id, child.source, child.model_config, child.session_key,
    child.started_at, child.ended_at, child.end_reason, child.last_activity_at, (
      SELECT max(messages.timestamp) AS max_1
      FROM messages
      WHERE messages.session_id = child.id
    ) AS last_message_at, parent.end_reason AS parent_end_reason,
    parent.session_key AS parent_session_key
FROM sessions AS child
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.parent_session_id = :session_id::VARCHAR
ORDER BY child.started_at, child.id;
