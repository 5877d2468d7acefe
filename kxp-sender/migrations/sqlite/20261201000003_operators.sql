-- Operators: the platform's own people, whose keys (`kxp_op_…`) create and list accounts and act
-- for any one account named by `X-Kxp-Account`. A table of its own, not a flag on accounts: an
-- operator owns no endpoints or events, and an account key can never become an operator key.

CREATE TABLE kxp_operators (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,     -- SHA-256 hex of the key; the key is never stored
    created_at   INTEGER NOT NULL
);
