-- statements.lineage_link(), sent by get_messages_as_conversation(session_id, include_ancestors=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 1 of 2, once, and once more per step up the session's lineage.

SELECT sessions.parent_session_id, sessions.model_config
FROM sessions
WHERE sessions.id = :session_id;
