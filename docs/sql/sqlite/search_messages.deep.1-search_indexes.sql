-- statements.search_indexes(), sent by search_messages('common', limit=5, offset=1005)
-- SQLite (pysqlite): step 1 of 6.

SELECT name
FROM sqlite_master
WHERE type = 'table' AND name IN ('messages_fts', 'messages_fts_trigram');
