-- statements.count_live_messages_upto(), sent by assert_export_safe(session_id, max_messages=...)
-- PostgreSQL (psycopg): the operation's one statement.

SELECT count(*) AS n
FROM (
  SELECT messages.id AS id
  FROM messages
  WHERE messages.session_id = :session_id::VARCHAR AND messages.active = 1
  LIMIT :bound
) AS counted;
