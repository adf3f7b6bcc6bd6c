-- API tokens issued to a person or an automation (`chorus user token create`).
-- Only a SHA-256 of the token is kept (a token is 32 random bytes, so a hash is as
-- good as a slow one); a request's token is found by its hash. The token's user
-- and its [roles] entry decide what it may do. Revoked rows stay, for the record.
CREATE TABLE user_tokens (
    id            TEXT PRIMARY KEY,               -- shown in lists; not secret
    user_name     TEXT NOT NULL,
    label         TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,           -- hex SHA-256 of the whole token
    created_at    TEXT NOT NULL,
    created_by    TEXT NOT NULL,
    last_used_at  TEXT,
    revoked_at    TEXT
);
CREATE INDEX idx_user_tokens_user ON user_tokens(user_name, created_at);
