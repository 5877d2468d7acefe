-- The account-keyed schema: audit rows that act on no account (an operator creating an
-- account or another operator, listing accounts) get a table of their own, keyed by their id;
-- kxp_audit keeps the rows of an account, and the contract step makes its account_id NOT NULL
-- once the rows without one written before (and by the previous release during a rolling
-- upgrade) are moved here. The operators' log reads both.
CREATE TABLE kxp_operator_audit (
    id          TEXT PRIMARY KEY,         -- aud_<UUIDv7>: time-ordered, so it is the cursor
    at          INTEGER NOT NULL,
    actor_kind  TEXT NOT NULL,            -- operator | account
    actor_id    TEXT NOT NULL,            -- op_… or acc_…
    actor_name  TEXT NOT NULL,            -- the name at the time
    via         TEXT NOT NULL,            -- console | api
    action      TEXT NOT NULL,            -- account.create, POST /v1/accounts, …
    target      TEXT                      -- the object acted on (an id), if one
);
