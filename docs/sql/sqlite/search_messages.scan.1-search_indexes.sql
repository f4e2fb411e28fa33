-- statements.search_indexes(), sent by search_messages('广西 OR 桂林')
-- SQLite (pysqlite): step 1 of 4.

SELECT name
FROM sqlite_master
WHERE type = 'table' AND name IN ('messages_fts', 'messages_fts_trigram');
