-- statements.messages_by_ids(dialect='sqlite'), sent by search_messages('common', limit=5, offset=1005)
-- SQLite (pysqlite): step 6 of 6.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id IN (
  SELECT ids.value
  FROM json_each(:ids) AS ids
);
