-- statements.child_sessions(), sent by get_compression_chain(session_id)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement, once, and once more per continuation down the compression chain.

SELECT child.id, child.parent_session_id, child.source, child.model_config, child.session_key,
    child.started_at, child.ended_at, child.end_reason, child.last_activity_at, (
      SELECT max(messages.timestamp) AS max_1
      FROM messages
      WHERE messages.session_id = child.id
    ) AS last_message_at, parent.end_reason AS parent_end_reason,
    parent.session_key AS parent_session_key
FROM sessions AS child INNER
JOIN sessions AS parent ON parent.id = child.parent_session_id
WHERE child.parent_session_id = :session_id
ORDER BY child.started_at, child.id;
