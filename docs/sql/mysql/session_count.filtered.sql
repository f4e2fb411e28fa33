-- statements.count_listed_sessions(dialect='mysql', chosen=SessionFilter(listable_only=True, by_sources=True, by_session_key=False, excluding_sources=False, by_cwd=False, by_message_count=False, archived='any', visible_only=False, own_dm=False)), sent by session_count(source, exclude_children=True, include_archived=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.
-- Parameters the statement carries: :empty = ''.
-- :sources is a list: one parameter per item.

SELECT count(*) AS count
FROM sessions
WHERE (sessions.parent_session_id IS NULL
    OR CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
        '$._branched_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL OR (EXISTS (
          SELECT *
          FROM sessions AS sessions_parent
          WHERE sessions_parent.id = sessions.parent_session_id AND sessions_parent.end_reason = 'branched'
              AND sessions.started_at >= sessions_parent.ended_at
        ))
    OR CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
        '$._reset_from')) COLLATE utf8mb4_unicode_ci END IS NOT NULL OR (EXISTS (
          SELECT *
          FROM sessions AS sessions_parent
          WHERE sessions_parent.id = sessions.parent_session_id
              AND sessions_parent.end_reason IN ('session_reset', 'session_switch', 'idle', 'daily',
                  'suspended', 'resume_pending_expired') AND sessions.session_key IS NOT NULL
              AND sessions.session_key != :empty AND sessions.session_key = sessions_parent.session_key
        )))
    AND CASE WHEN JSON_VALID(sessions.model_config) THEN JSON_UNQUOTE(JSON_EXTRACT(sessions.model_config,
        '$._delegate_from')) COLLATE utf8mb4_unicode_ci END IS NULL
    AND sessions.source IN (:sources);
