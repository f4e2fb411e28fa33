-- statements.session_and_parent(), sent by create_session(session_id, source, parent_session_id=...)
-- SQLite (pysqlite): step 2 of 3.

SELECT sessions.chat_id, sessions.chat_type, sessions.cwd, sessions.display_name,
    sessions.end_reason, sessions.git_branch, sessions.git_repo_root, sessions.id,
    sessions.origin_json, sessions.profile_name, sessions.session_key, sessions.thread_id,
    sessions.user_id
FROM sessions
WHERE sessions.id = :id OR sessions.id = :parent_session_id;
