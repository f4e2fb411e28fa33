-- statements.insert_session(dialect_name='sqlite'), sent by create_session(session_id, source, **fields)
-- SQLite (pysqlite): the operation's one statement.

INSERT INTO sessions (id, source, user_id, title, model, parent_session_id, started_at, ended_at,
    end_reason, model_config, system_prompt, session_key, chat_id, chat_type, thread_id,
    display_name, origin_json, system_prompt_hash, cwd, git_branch, git_repo_root, profile_name)
VALUES (:id, :source, :user_id, :title, :model, :parent_session_id, :started_at, :ended_at,
    :end_reason, :model_config, :system_prompt, :session_key, :chat_id, :chat_type, :thread_id,
    :display_name, :origin_json, :system_prompt_hash, :cwd, :git_branch, :git_repo_root,
    :profile_name)
ON CONFLICT (id) DO UPDATE
SET source = CASE WHEN (sessions.source = 'unknown') THEN excluded.source ELSE sessions.source END,
    user_id = coalesce(sessions.user_id, excluded.user_id), model = coalesce(sessions.model,
        excluded.model), parent_session_id = coalesce(sessions.parent_session_id,
            excluded.parent_session_id), model_config = coalesce(sessions.model_config,
                excluded.model_config),
    system_prompt = CASE WHEN (sessions.system_prompt_hash IS NULL
        AND excluded.system_prompt_hash IS NOT NULL) THEN NULL ELSE sessions.system_prompt END,
    session_key = coalesce(sessions.session_key, excluded.session_key),
    chat_id = coalesce(sessions.chat_id, excluded.chat_id), chat_type = coalesce(sessions.chat_type,
        excluded.chat_type), thread_id = coalesce(sessions.thread_id, excluded.thread_id),
    display_name = coalesce(sessions.display_name, excluded.display_name),
    origin_json = coalesce(sessions.origin_json, excluded.origin_json),
    system_prompt_hash = coalesce(sessions.system_prompt_hash, excluded.system_prompt_hash),
    cwd = coalesce(sessions.cwd, excluded.cwd), git_repo_root = coalesce(sessions.git_repo_root,
        excluded.git_repo_root), profile_name = coalesce(sessions.profile_name,
            excluded.profile_name);
