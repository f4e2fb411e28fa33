-- statements.delete_model_usage(), sent by prune_sessions(older_than_days)
-- PostgreSQL (psycopg): step 7 of 10, once per session deleted.

DELETE FROM session_model_usage
WHERE session_model_usage.session_id = :session_id::VARCHAR;
