-- The sender's outbox. Times are Unix milliseconds (INTEGER) in both backends, taken from the
-- application clock, so the same code computes schedules and leases everywhere.

CREATE TABLE kxp_accounts (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL,
    api_key_hash        TEXT NOT NULL UNIQUE,     -- SHA-256 hex of the key; the key is never stored
    default_api_version TEXT NOT NULL,
    created_at          INTEGER NOT NULL
);

CREATE TABLE kxp_endpoints (
    id          TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES kxp_accounts (id),
    url         TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    event_types TEXT NOT NULL,                    -- JSON array of types; ["*"] for all
    timeout_ms  INTEGER NOT NULL,
    status      TEXT NOT NULL DEFAULT 'active',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX kxp_endpoints_account ON kxp_endpoints (account_id, id);

CREATE TABLE kxp_endpoint_secrets (
    id          INTEGER PRIMARY KEY AUTOINCREMENT, -- newest first = highest id
    endpoint_id TEXT NOT NULL REFERENCES kxp_endpoints (id) ON DELETE CASCADE,
    secret      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER                            -- NULL: live until rotated out
);
CREATE INDEX kxp_endpoint_secrets_endpoint ON kxp_endpoint_secrets (endpoint_id, id);

CREATE TABLE kxp_events (
    id              TEXT PRIMARY KEY,              -- UUIDv4, the receivers' dedup key
    account_id      TEXT NOT NULL REFERENCES kxp_accounts (id),
    event_type      TEXT NOT NULL,
    api_version     TEXT NOT NULL,
    payload         TEXT NOT NULL,                 -- the exact envelope bytes every attempt sends
    created_at      INTEGER NOT NULL,
    idempotency_key TEXT,
    request_hash    TEXT
);
CREATE UNIQUE INDEX kxp_events_idempotency ON kxp_events (account_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX kxp_events_account ON kxp_events (account_id, id);

CREATE TABLE kxp_deliveries (
    id               TEXT PRIMARY KEY,             -- dlv_<UUIDv7>: time-ordered, so it is the cursor
    account_id       TEXT NOT NULL,
    event_id         TEXT NOT NULL REFERENCES kxp_events (id),
    endpoint_id      TEXT NOT NULL REFERENCES kxp_endpoints (id),
    status           TEXT NOT NULL,                -- pending | delivering | delivered | dead
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_attempt_at INTEGER,
    next_attempt_at  INTEGER NOT NULL,
    lease_until      INTEGER,
    lease_owner      TEXT,
    last_status      INTEGER,
    last_error       TEXT,
    replayed_by      TEXT,                         -- the delivery that replayed this one
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
-- "What is due" and "whose lease ran out" read only their own small slice of a large table.
CREATE INDEX kxp_deliveries_due ON kxp_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX kxp_deliveries_leased ON kxp_deliveries (lease_until) WHERE status = 'delivering';
CREATE INDEX kxp_deliveries_account ON kxp_deliveries (account_id, status, id);
CREATE INDEX kxp_deliveries_endpoint ON kxp_deliveries (endpoint_id, status, id);
CREATE INDEX kxp_deliveries_event ON kxp_deliveries (event_id);

CREATE TABLE kxp_attempts (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id      TEXT NOT NULL REFERENCES kxp_deliveries (id),
    attempt          INTEGER NOT NULL,
    started_at       INTEGER NOT NULL,
    duration_ms      INTEGER NOT NULL,
    status_code      INTEGER,
    error            TEXT,
    response_snippet TEXT
);
CREATE INDEX kxp_attempts_delivery ON kxp_attempts (delivery_id, attempt);
