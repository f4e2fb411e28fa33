-- statements.lineage_ids(), sent by set_session_hidden(session_id, hidden)
-- PostgreSQL (psycopg): step 1 of 2.

WITH RECURSIVE ancestors(id) AS (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id = :session_id::VARCHAR
  UNION
  SELECT up_parent.id AS id
  FROM ancestors
  JOIN sessions AS up_child ON up_child.id = ancestors.id
  JOIN sessions AS up_parent ON up_parent.id = up_child.parent_session_id
  WHERE up_parent.end_reason = 'compression'
),
descendants(id) AS (
  SELECT sessions.id AS id
  FROM sessions
  WHERE sessions.id = :session_id::VARCHAR
  UNION
  SELECT down_child.id AS id
  FROM descendants
  JOIN sessions AS down_parent ON down_parent.id = descendants.id
  JOIN sessions AS down_child ON down_child.parent_session_id = down_parent.id
  WHERE down_parent.end_reason = 'compression'
)
SELECT ancestors.id
FROM ancestors
UNION
SELECT descendants.id
FROM descendants;
