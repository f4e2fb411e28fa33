-- statements.messages_by_ids(dialect='mysql'), sent by search_messages('大别山项目', source_filter=[...], exclude_sources=[...], role_filter=[...], sort='newest')
-- MySQL 8.0 (PyMySQL): step 3 of 3.
-- :ids is a list: one parameter per item.

SELECT messages.id, messages.`role`, messages.content
FROM messages
WHERE messages.id IN (:ids);
