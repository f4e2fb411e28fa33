-- statements.count_live_messages_upto(), sent by assert_export_safe(session_id, max_messages=...)
-- SQLite (pysqlite): the operation's one statement.
-- Parameters the statement carries: :param_1 = 0.

SELECT count(*) AS n
FROM (
  SELECT messages.id AS id
  FROM messages
  WHERE messages.session_id = :session_id AND messages.active = 1
  LIMIT :bound
  OFFSET :param_1
) AS counted;
