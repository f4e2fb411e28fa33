-- statements.insert_session(dialect_name='postgresql'), sent by create_session(session_id, source, **fields)
-- PostgreSQL (psycopg): the operation's one statement.

INSERT INTO sessions (id, source, user_id, title, model, parent_session_id, started_at, ended_at,
    end_reason, model_config, system_prompt)
VALUES (:id::VARCHAR, :source::VARCHAR, :user_id::VARCHAR, :title::VARCHAR, :model::VARCHAR,
    :parent_session_id::VARCHAR, :started_at, :ended_at, :end_reason::VARCHAR,
    :model_config::VARCHAR, :system_prompt::VARCHAR)
ON CONFLICT (id) DO NOTHING;
