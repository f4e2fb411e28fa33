-- statements.count_listed_sessions(dialect='postgresql', chosen=SessionFilter(listable_only=True, by_sources=True, by_session_key=False, excluding_sources=False, by_cwd=False, by_message_count=False, archived='any', visible_only=False, own_dm=False)), sent by session_count(source, exclude_children=True, include_archived=True)
-- PostgreSQL (psycopg): the operation's one statement.
-- Parameters the statement carries: :empty = ''.

SELECT count(*) AS count
FROM sessions
WHERE (sessions.parent_session_id IS NULL
    OR substring(sessions.model_config from '"_branched_from"\s*:\s*"([^"]*)"') IS NOT NULL
    OR (EXISTS (
      SELECT *
      FROM sessions AS sessions_parent
      WHERE sessions_parent.id = sessions.parent_session_id
          AND sessions_parent.end_reason = 'branched'
          AND sessions.started_at >= sessions_parent.ended_at
    )) OR substring(sessions.model_config from '"_reset_from"\s*:\s*"([^"]*)"') IS NOT NULL
    OR (EXISTS (
      SELECT *
      FROM sessions AS sessions_parent
      WHERE sessions_parent.id = sessions.parent_session_id
          AND sessions_parent.end_reason IN ('session_reset', 'session_switch', 'idle', 'daily',
              'suspended', 'resume_pending_expired') AND sessions.session_key IS NOT NULL
          AND sessions.session_key != :empty::VARCHAR
          AND sessions.session_key = sessions_parent.session_key
    ))) AND substring(sessions.model_config from '"_delegate_from"\s*:\s*"([^"]*)"') IS NULL
    AND sessions.source = ANY (:sources::VARCHAR[]);
