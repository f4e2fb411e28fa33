-- statements.delete_model_usage(), sent by delete_session(session_id)
-- PostgreSQL (psycopg): step 7 of 10, once per session deleted (with its delegate runs).

DELETE FROM session_model_usage
WHERE session_model_usage.session_id = :session_id::VARCHAR;
