-- statements.neighbour_ids(dialect='mysql'), sent by search_messages('广西 OR 桂林')
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 3, each hit's neighbours, then their text (once for the whole page).
-- Parameters the statement carries: :param_1 = 1, :param_2 = 1.
-- :ids is a list: one parameter per item.

SELECT target.id, (
  SELECT `before`.id
  FROM messages AS `before`
  WHERE `before`.session_id = target.session_id AND (`before`.timestamp < target.timestamp
      OR `before`.timestamp = target.timestamp AND `before`.id < target.id)
  ORDER BY `before`.timestamp DESC, `before`.id DESC
  LIMIT :param_1
) AS before_id, (
  SELECT after.id
  FROM messages AS after
  WHERE after.session_id = target.session_id AND (after.timestamp > target.timestamp
      OR after.timestamp = target.timestamp AND after.id > target.id)
  ORDER BY after.timestamp ASC, after.id ASC
  LIMIT :param_2
) AS after_id
FROM messages AS target
WHERE target.id IN (:ids);
