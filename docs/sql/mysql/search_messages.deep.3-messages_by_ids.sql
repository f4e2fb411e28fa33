-- statements.messages_by_ids(dialect='mysql'), sent by search_messages('common', limit=5, offset=1005)
-- MySQL 8.0 (PyMySQL): step 3 of 3.
-- :ids is a list: one parameter per item.

SELECT messages.id, messages.`role`, messages.content
FROM messages
WHERE messages.id IN (:ids);
