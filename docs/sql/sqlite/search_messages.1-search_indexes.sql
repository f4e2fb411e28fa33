-- statements.search_indexes(), sent by search_messages('deployscript')
-- SQLite (pysqlite): step 1 of 6, which of upstream's FTS5 tables the file has.

SELECT name
FROM sqlite_master
WHERE type = 'table' AND name IN ('messages_fts', 'messages_fts_trigram');
