-- statements.usage_route(), sent by update_token_counts(session_id, ..., absolute=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 3 of 5.

SELECT sessions.model, sessions.billing_provider, sessions.billing_base_url, sessions.billing_mode,
    sessions.api_call_count
FROM sessions
WHERE sessions.id = :session_id
FOR UPDATE;
