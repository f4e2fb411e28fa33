-- statements.inherit_session(), sent by create_session(session_id, source, parent_session_id=...)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 4 of 4, when the parent has something to give.

UPDATE sessions
SET user_id=coalesce(sessions.user_id, :user_id), session_key=coalesce(sessions.session_key,
    :session_key), chat_id=coalesce(sessions.chat_id, :chat_id),
    chat_type=coalesce(sessions.chat_type, :chat_type), thread_id=coalesce(sessions.thread_id,
        :thread_id), display_name=coalesce(sessions.display_name, :display_name),
    origin_json=coalesce(sessions.origin_json, :origin_json), cwd=coalesce(sessions.cwd, :cwd),
    git_branch=coalesce(sessions.git_branch, :git_branch),
    git_repo_root=coalesce(sessions.git_repo_root, :git_repo_root),
    profile_name=coalesce(sessions.profile_name, :profile_name)
WHERE sessions.id = :session_id;
