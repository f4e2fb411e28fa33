-- statements.fill_session(), sent by update_token_counts(session_id, ..., absolute=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 2 of 5, MySQL/MariaDB: when the id existed (elsewhere the insert fills it in).

UPDATE sessions
SET system_prompt=CASE WHEN (sessions.system_prompt_hash IS NULL AND :system_prompt_hash IS NOT NULL) THEN NULL ELSE sessions.system_prompt END,
    system_prompt_hash=coalesce(sessions.system_prompt_hash, :system_prompt_hash),
    source=CASE WHEN (sessions.source = 'unknown') THEN :source ELSE sessions.source END,
    model=coalesce(sessions.model, :model), model_config=coalesce(sessions.model_config,
        :model_config), user_id=coalesce(sessions.user_id, :user_id),
    session_key=coalesce(sessions.session_key, :session_key), chat_id=coalesce(sessions.chat_id,
        :chat_id), chat_type=coalesce(sessions.chat_type, :chat_type),
    thread_id=coalesce(sessions.thread_id, :thread_id),
    parent_session_id=coalesce(sessions.parent_session_id, :parent_session_id),
    cwd=coalesce(sessions.cwd, :cwd), profile_name=coalesce(sessions.profile_name, :profile_name),
    git_repo_root=coalesce(sessions.git_repo_root, :git_repo_root),
    origin_json=coalesce(sessions.origin_json, :origin_json),
    display_name=coalesce(sessions.display_name, :display_name)
WHERE sessions.id = :session_id;
