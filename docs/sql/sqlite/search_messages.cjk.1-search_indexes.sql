-- statements.search_indexes(), sent by search_messages('大别山项目', source_filter=[...], exclude_sources=[...], role_filter=[...], sort='newest')
-- SQLite (pysqlite): step 1 of 4.

SELECT name
FROM sqlite_master
WHERE type = 'table' AND name IN ('messages_fts', 'messages_fts_trigram');
