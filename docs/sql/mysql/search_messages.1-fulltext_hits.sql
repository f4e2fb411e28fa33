-- statements.fulltext_hits(dialect='mysql', order=None, chosen=SearchFilter(include_inactive=False, by_sources=False, excluding_sources=False, by_roles=False)), sent by search_messages('deployscript')
-- MySQL 8.0 (PyMySQL): step 1 of 4.

SELECT messages.id, messages.session_id, messages.`role`, messages.content, messages.timestamp,
    messages.tool_name, sessions.source, sessions.model, sessions.started_at AS session_started
FROM messages INNER
JOIN sessions ON sessions.id = messages.session_id
WHERE (MATCH (messages.content, messages.tool_name, messages.tool_calls) AGAINST (:query IN BOOLEAN MODE)) > 0
    AND (messages.active = 1 OR messages.compacted = 1)
    AND coalesce(messages.display_kind, '') != 'hidden'
ORDER BY MATCH (messages.content, messages.tool_name, messages.tool_calls) AGAINST (:query IN BOOLEAN MODE) DESC
LIMIT :offset, :limit;
