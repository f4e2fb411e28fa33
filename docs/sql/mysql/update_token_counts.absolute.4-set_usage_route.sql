-- statements.set_usage_route(), sent by update_token_counts(session_id, ..., absolute=True)
-- MySQL 8.0 and MariaDB 10.11 (PyMySQL): step 4 of 5, the first accounted call, on another route.

UPDATE sessions
SET model=:model, billing_provider=:billing_provider, billing_base_url=:billing_base_url,
    billing_mode=:billing_mode
WHERE sessions.id = :session_id;
