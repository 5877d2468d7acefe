-- A console session's one-time message: the signing secret of an endpoint just registered or
-- rotated, kept from the form's POST to the GET it redirects to (so a reload shows nothing, and
-- the POST is never sent twice), then cleared by that GET. Another process behind the same load
-- balancer may answer the GET: the message lives in the session's row, not in memory.
ALTER TABLE kxp_sessions ADD COLUMN flash TEXT;

-- The replays a bulk replay just made, newest first (the dead-letter page shows them move to
-- delivered): `replayed_by` holds the replay's id, time-ordered, so a range of it is a range of
-- time. Partial: most deliveries are never replayed.
CREATE INDEX kxp_deliveries_replayed_by ON kxp_deliveries (replayed_by) WHERE replayed_by IS NOT NULL;

-- The audit log: every change made through the console, or through the API with an operator
-- key: who (an operator, or an account's portal session), by which way, to which account, what,
-- and when. Shown to operators; rows are never updated.
CREATE TABLE kxp_audit (
    id          TEXT PRIMARY KEY,         -- aud_<UUIDv7>: time-ordered, so it is the cursor
    at          BIGINT NOT NULL,
    actor_kind  TEXT NOT NULL,            -- operator | account
    actor_id    TEXT NOT NULL,            -- op_… or acc_…
    actor_name  TEXT NOT NULL,            -- the name at the time
    via         TEXT NOT NULL,            -- console | api
    account_id  TEXT,                     -- the account acted on, if one
    action      TEXT NOT NULL,            -- endpoint.pause, POST /v1/endpoints, …
    target      TEXT                      -- the object acted on (an id), if one
);

CREATE INDEX kxp_audit_account ON kxp_audit (account_id, id);

-- Which secrets signed each attempt, by fingerprint (the first 8 bytes, in hex, of SHA-256 of
-- "kxp-key-id\0" and the secret), comma-separated, newest secret first: the console shows them,
-- so a merchant can tell which secret a failing receiver should have. Never the secrets.
ALTER TABLE kxp_attempts ADD COLUMN signed_with TEXT;
