-- statements.set_usage_route(), sent by update_token_counts(session_id, ..., absolute=True)
-- SQLite (pysqlite): step 3 of 4, the first accounted call, on another route.

UPDATE sessions
SET model=:model, billing_provider=:billing_provider, billing_base_url=:billing_base_url,
    billing_mode=:billing_mode
WHERE sessions.id = :session_id;
