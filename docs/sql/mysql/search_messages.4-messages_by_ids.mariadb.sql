-- statements.messages_by_ids(dialect='mysql'), sent by search_messages('deployscript')
-- MariaDB 10.11 (PyMySQL): step 4 of 4.
-- :ids is a list: one parameter per item.

SELECT messages.id, messages.role, messages.content
FROM messages
WHERE messages.id IN (:ids);
