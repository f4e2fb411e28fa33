-- statements.messages_by_ids(dialect='sqlite'), sent by search_messages('大别山项目', source_filter=[...], exclude_sources=[...], role_filter=[...], sort='newest')
-- SQLite (pysqlite): step 4 of 4.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id IN (
  SELECT ids.value
  FROM json_each(:ids) AS ids
);
