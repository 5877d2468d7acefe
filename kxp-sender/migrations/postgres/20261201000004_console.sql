-- The console's sign-ins. Portal links: one-time tokens an account (or an operator for it) asks
-- for through `POST /v1/portal-links`; `used_at` is set by the one POST that consumes a link, so a
-- second one finds nothing to take. Sessions: one row per signed-in browser, for an account (with
-- the link's scope) or an operator. Tokens and session ids are stored only as SHA-256 hashes: a
-- database leak signs no one in. The CSRF token is not a credential by itself (it works only
-- beside the session cookie), so it is kept as it is, to be put in the forms.

CREATE TABLE kxp_portal_links (
    token_hash   TEXT PRIMARY KEY,         -- SHA-256 hex of the token; the token is never stored
    account_id   TEXT NOT NULL REFERENCES kxp_accounts (id) ON DELETE CASCADE,
    scope        TEXT NOT NULL,            -- manage | read
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    used_at      BIGINT
);

CREATE TABLE kxp_sessions (
    id_hash      TEXT PRIMARY KEY,         -- SHA-256 hex of the cookie's value
    account_id   TEXT REFERENCES kxp_accounts (id) ON DELETE CASCADE,
    operator_id  TEXT REFERENCES kxp_operators (id) ON DELETE CASCADE,
    scope        TEXT NOT NULL,            -- manage | read (operators: manage)
    csrf_token   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    CHECK ((account_id IS NULL) <> (operator_id IS NULL))
);

-- "Sign out everywhere": every session of one account, or of one operator.
CREATE INDEX kxp_sessions_account ON kxp_sessions (account_id);
CREATE INDEX kxp_sessions_operator ON kxp_sessions (operator_id);
