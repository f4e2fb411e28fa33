-- statements.insert_session(dialect_name='mysql'), sent by create_session(session_id, source, **fields)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): the operation's one statement.

INSERT INTO sessions (id, source, user_id, title, model, parent_session_id, started_at, ended_at,
    end_reason, model_config, system_prompt)
SELECT :id AS anon_1, :source AS anon_2, :user_id AS anon_3, :title AS anon_4, :model AS anon_5,
    :parent_session_id AS anon_6, :started_at AS anon_7, :ended_at AS anon_8, :end_reason AS anon_9,
    :model_config AS anon_10, :system_prompt AS anon_11
FROM DUAL
WHERE NOT (EXISTS (SELECT * FROM sessions WHERE sessions.id = :id));
