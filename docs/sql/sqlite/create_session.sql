-- statements.insert_session(dialect_name='sqlite'), sent by create_session(session_id, source, **fields)
-- SQLite (pysqlite): the operation's one statement.

INSERT INTO sessions (id, source, user_id, title, model, parent_session_id, started_at, ended_at,
    end_reason, model_config, system_prompt)
VALUES (:id, :source, :user_id, :title, :model, :parent_session_id, :started_at, :ended_at,
    :end_reason, :model_config, :system_prompt)
ON CONFLICT (id) DO NOTHING;
