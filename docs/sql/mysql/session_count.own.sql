-- statements.count_listed_sessions(dialect='mysql', chosen=SessionFilter(listable_only=False, by_sources=False, by_session_key=False, excluding_sources=False, by_cwd=False, by_message_count=False, archived='live', visible_only=False, own_dm=True)), sent by session_count(scope='own', requester_user_id=...)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.
-- Parameters the statement carries: :empty = ''.

SELECT count(*) AS count
FROM sessions
WHERE sessions.archived = 0 AND sessions.source = 'telegram' AND sessions.chat_type = 'dm'
    AND sessions.chat_id IS NOT NULL AND sessions.chat_id != :empty
    AND sessions.chat_id = :requester_user_id;
