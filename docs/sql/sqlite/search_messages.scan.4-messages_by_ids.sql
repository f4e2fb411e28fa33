-- statements.messages_by_ids(dialect='sqlite'), sent by search_messages('广西 OR 桂林')
-- SQLite (pysqlite): step 4 of 4.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id IN (
  SELECT ids.value
  FROM json_each(:ids) AS ids
);
