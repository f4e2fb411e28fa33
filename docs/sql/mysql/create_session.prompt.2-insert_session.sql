-- statements.insert_session(dialect_name='mysql'), sent by create_session(session_id, source, system_prompt=...)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 4.

INSERT INTO sessions (id, source, user_id, title, model, parent_session_id, started_at, ended_at,
    end_reason, model_config, system_prompt, session_key, chat_id, chat_type, thread_id, cwd,
    profile_name, git_repo_root, git_branch, origin_json, display_name, system_prompt_hash)
SELECT :id AS anon_1, :source AS anon_2, :user_id AS anon_3, :title AS anon_4, :model AS anon_5,
    :parent_session_id AS anon_6, :started_at AS anon_7, :ended_at AS anon_8, :end_reason AS anon_9,
    :model_config AS anon_10, :system_prompt AS anon_11, :session_key AS anon_12,
    :chat_id AS anon_13, :chat_type AS anon_14, :thread_id AS anon_15, :cwd AS anon_16,
    :profile_name AS anon_17, :git_repo_root AS anon_18, :git_branch AS anon_19,
    :origin_json AS anon_20, :display_name AS anon_21, :system_prompt_hash AS anon_22
FROM DUAL
WHERE NOT (EXISTS (SELECT * FROM sessions WHERE sessions.id = :id));
