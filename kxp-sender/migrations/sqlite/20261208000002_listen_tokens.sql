-- Listen tokens (issue 36): what `kxp listen --token` and the console's "Listen locally" use
-- instead of an API key. A token (`kxp_lt_…`) may only create, read and delete its account's
-- temporary pull endpoints, until it expires (24 hours at most). Only its SHA-256 is kept.
-- No foreign key to the account: on Citus this is a reference table, as kxp_api_keys is, and
-- the account's row is on a worker.
CREATE TABLE kxp_listen_tokens (
    token_hash TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX kxp_listen_tokens_expiry ON kxp_listen_tokens (expires_at);
