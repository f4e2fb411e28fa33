-- statements.usage_route(), sent by update_token_counts(session_id, input_tokens, ...)
-- SQLite (pysqlite): step 2 of 5.

SELECT sessions.model, sessions.billing_provider, sessions.billing_base_url, sessions.billing_mode,
    sessions.api_call_count
FROM sessions
WHERE sessions.id = :session_id;
