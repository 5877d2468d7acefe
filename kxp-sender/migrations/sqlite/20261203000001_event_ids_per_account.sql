-- A producer-chosen event id is unique within its account, not across accounts: the key of
-- kxp_events becomes (account_id, id), and what refers to an event refers to it by both (security
-- round 2, item 1). SQLite cannot change a key in place, and sqlx runs a SQLite migration inside
-- a transaction, where foreign keys cannot be turned off; so, in that transaction:
-- 1. the foreign keys are checked at COMMIT instead of at each statement (defer_foreign_keys);
-- 2. kxp_events, kxp_event_tags and kxp_deliveries (whose foreign key changes) are copied aside
--    and dropped; dropping kxp_deliveries leaves kxp_attempts' rows without their delivery for a
--    moment, which SQLite counts as pending violations;
-- 3. each is created in its new shape under its own name and filled back; every delivery put
--    back takes its attempts' violations off the count, so COMMIT finds none, or fails and rolls
--    the whole migration back if any row lost its parent.

PRAGMA defer_foreign_keys = ON;

CREATE TEMP TABLE kxp_events_before AS SELECT * FROM kxp_events;
CREATE TEMP TABLE kxp_event_tags_before AS SELECT * FROM kxp_event_tags;
CREATE TEMP TABLE kxp_deliveries_before AS SELECT * FROM kxp_deliveries;
DROP TABLE kxp_event_tags;
DROP TABLE kxp_deliveries;
DROP TABLE kxp_events;

CREATE TABLE kxp_events (
    id              TEXT NOT NULL,                 -- the receivers' dedup key, unique per account
    account_id      TEXT NOT NULL REFERENCES kxp_accounts (id),
    event_type      TEXT NOT NULL,
    api_version     TEXT NOT NULL,
    payload         TEXT NOT NULL,                 -- the exact envelope bytes every attempt sends
    created_at      INTEGER NOT NULL,
    idempotency_key TEXT,
    request_hash    TEXT,
    ordering_key    TEXT,
    PRIMARY KEY (account_id, id)
);
INSERT INTO kxp_events
    (id, account_id, event_type, api_version, payload, created_at, idempotency_key, request_hash, ordering_key)
    SELECT id, account_id, event_type, api_version, payload, created_at, idempotency_key, request_hash, ordering_key
    FROM kxp_events_before;
CREATE UNIQUE INDEX kxp_events_idempotency ON kxp_events (account_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX kxp_events_account_created ON kxp_events (account_id, created_at, id);

CREATE TABLE kxp_event_tags (
    event_id   TEXT NOT NULL,
    tag        TEXT NOT NULL,                 -- 1 to 64 printable ASCII characters, no spaces
    account_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,              -- the event's
    PRIMARY KEY (account_id, event_id, tag),
    FOREIGN KEY (account_id, event_id) REFERENCES kxp_events (account_id, id) ON DELETE CASCADE
);
INSERT INTO kxp_event_tags (event_id, tag, account_id, created_at)
    SELECT event_id, tag, account_id, created_at FROM kxp_event_tags_before;
CREATE INDEX kxp_event_tags_search ON kxp_event_tags (account_id, tag, created_at, event_id);

CREATE TABLE kxp_deliveries (
    id               TEXT PRIMARY KEY,             -- dlv_<UUIDv7>: time-ordered, so it is the cursor
    account_id       TEXT NOT NULL,
    event_id         TEXT NOT NULL,
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
    updated_at       INTEGER NOT NULL,
    sequence         BIGINT,
    FOREIGN KEY (account_id, event_id) REFERENCES kxp_events (account_id, id)
);
INSERT INTO kxp_deliveries
    (id, account_id, event_id, endpoint_id, status, attempts, first_attempt_at, next_attempt_at,
     lease_until, lease_owner, last_status, last_error, replayed_by, created_at, updated_at, sequence)
    SELECT id, account_id, event_id, endpoint_id, status, attempts, first_attempt_at, next_attempt_at,
     lease_until, lease_owner, last_status, last_error, replayed_by, created_at, updated_at, sequence
    FROM kxp_deliveries_before;
CREATE INDEX kxp_deliveries_due ON kxp_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX kxp_deliveries_leased ON kxp_deliveries (lease_until) WHERE status = 'delivering';
CREATE INDEX kxp_deliveries_account ON kxp_deliveries (account_id, status, id);
CREATE INDEX kxp_deliveries_endpoint ON kxp_deliveries (endpoint_id, status, id);
CREATE INDEX kxp_deliveries_account_event ON kxp_deliveries (account_id, event_id);
CREATE INDEX kxp_deliveries_finished ON kxp_deliveries (updated_at) WHERE status IN ('delivered', 'dead');
CREATE INDEX kxp_deliveries_account_due ON kxp_deliveries (account_id, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX kxp_deliveries_endpoint_due ON kxp_deliveries (endpoint_id, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX kxp_deliveries_replayed_by ON kxp_deliveries (replayed_by) WHERE replayed_by IS NOT NULL;
CREATE INDEX kxp_deliveries_unnumbered ON kxp_deliveries (endpoint_id, created_at, id)
    WHERE sequence IS NULL AND replayed_by IS NULL;
CREATE INDEX kxp_deliveries_sequence ON kxp_deliveries (endpoint_id, sequence)
    WHERE sequence IS NOT NULL;

DROP TABLE kxp_events_before;
DROP TABLE kxp_event_tags_before;
DROP TABLE kxp_deliveries_before;
