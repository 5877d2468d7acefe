-- The account-keyed schema: what a request knows before it knows its account is looked up in
-- a small table keyed by that credential, and everything after is scoped by the account
-- (docs/design/account-keyed-schema.md). On a database split by account these tables are the
-- ones every node holds.
--
-- An API key's hash → its account (an account's key moves here from kxp_accounts.api_key_hash,
-- which the previous release still reads and writes; this release writes both and reads this
-- table first).
CREATE TABLE kxp_api_keys (
    key_hash   TEXT   NOT NULL PRIMARY KEY,
    account_id TEXT   NOT NULL REFERENCES kxp_accounts (id),
    created_at BIGINT NOT NULL
);
INSERT INTO kxp_api_keys (key_hash, account_id, created_at)
    SELECT api_key_hash, id, created_at FROM kxp_accounts;
-- An endpoint's id → its account: the catch-up feed and the public key set name an endpoint
-- and nothing else. Rows stay when an endpoint is deleted (its id still answers "deleted").
CREATE TABLE kxp_endpoint_directory (
    endpoint_id TEXT NOT NULL PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES kxp_accounts (id)
);
INSERT INTO kxp_endpoint_directory (endpoint_id, account_id)
    SELECT id, account_id FROM kxp_endpoints;
