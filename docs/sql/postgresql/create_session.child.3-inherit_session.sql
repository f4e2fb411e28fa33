-- statements.inherit_session(), sent by create_session(session_id, source, parent_session_id=...)
-- PostgreSQL (psycopg): step 3 of 3, when the parent has something to give.

UPDATE sessions
SET user_id=coalesce(sessions.user_id, :user_id::VARCHAR),
    session_key=coalesce(sessions.session_key, :session_key::VARCHAR),
    chat_id=coalesce(sessions.chat_id, :chat_id::VARCHAR), chat_type=coalesce(sessions.chat_type,
        :chat_type::VARCHAR), thread_id=coalesce(sessions.thread_id, :thread_id::VARCHAR),
    display_name=coalesce(sessions.display_name, :display_name::VARCHAR),
    origin_json=coalesce(sessions.origin_json, :origin_json::VARCHAR), cwd=coalesce(sessions.cwd,
        :cwd::VARCHAR), git_branch=coalesce(sessions.git_branch, :git_branch::VARCHAR),
    git_repo_root=coalesce(sessions.git_repo_root, :git_repo_root::VARCHAR),
    profile_name=coalesce(sessions.profile_name, :profile_name::VARCHAR)
WHERE sessions.id = :session_id::VARCHAR;
