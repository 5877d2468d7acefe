-- The account-keyed schema, contract step (PostgreSQL's 20261205000001 to …16, in one go: SQLite
-- has one process, which runs this before serving): every key leads with the account, foreign
-- keys between account tables name it, and `account_id` is NOT NULL everywhere. SQLite cannot
-- change a key in place, so ten tables are rebuilt as 20261203000001 rebuilt the events, and
-- kxp_accounts too, whose API key hash is no longer unique nor required (its home is
-- kxp_api_keys; PostgreSQL's …17), with portal links and sessions, which would go with their
-- account's row otherwise (ON DELETE CASCADE):
-- foreign keys checked at COMMIT (a migration runs in a transaction, where they cannot be turned
-- off), each table copied aside, dropped children first (so that no ON DELETE CASCADE fires),
-- created in its new shape and filled back. Attempts and secrets keep their ids, which were
-- unique in the whole table and are now numbered per delivery and per endpoint (no longer a
-- rowid alias: SQLite does not number them, the store does). A row the expand step left without
-- its account gets it from its parent here; account-less audit rows move to kxp_operator_audit.
-- (An `INSERT … SELECT … ON CONFLICT` needs a WHERE, or SQLite reads ON as a join's.)

PRAGMA defer_foreign_keys = ON;

INSERT INTO kxp_operator_audit (id, at, actor_kind, actor_id, actor_name, via, action, target)
    SELECT id, at, actor_kind, actor_id, actor_name, via, action, target
    FROM kxp_audit WHERE account_id IS NULL
    ON CONFLICT DO NOTHING;

CREATE TEMP TABLE kxp_endpoints_before AS SELECT * FROM kxp_endpoints;
CREATE TEMP TABLE kxp_endpoint_secrets_before AS SELECT * FROM kxp_endpoint_secrets;
CREATE TEMP TABLE kxp_deliveries_before AS SELECT * FROM kxp_deliveries;
CREATE TEMP TABLE kxp_attempts_before AS SELECT * FROM kxp_attempts;
CREATE TEMP TABLE kxp_endpoint_stats_before AS SELECT * FROM kxp_endpoint_stats;
CREATE TEMP TABLE kxp_endpoint_stats_hourly_before AS SELECT * FROM kxp_endpoint_stats_hourly;
CREATE TEMP TABLE kxp_schemas_before AS SELECT * FROM kxp_schemas;
CREATE TEMP TABLE kxp_notifications_before AS SELECT * FROM kxp_notifications;
CREATE TEMP TABLE kxp_sequences_before AS SELECT * FROM kxp_sequences;
CREATE TEMP TABLE kxp_audit_before AS SELECT * FROM kxp_audit WHERE account_id IS NOT NULL;
CREATE TEMP TABLE kxp_accounts_before AS SELECT * FROM kxp_accounts;
CREATE TEMP TABLE kxp_portal_links_before AS SELECT * FROM kxp_portal_links;
CREATE TEMP TABLE kxp_sessions_before AS SELECT * FROM kxp_sessions;

DROP TABLE kxp_attempts;
DROP TABLE kxp_endpoint_secrets;
DROP TABLE kxp_endpoint_stats;
DROP TABLE kxp_endpoint_stats_hourly;
DROP TABLE kxp_notifications;
DROP TABLE kxp_deliveries;
DROP TABLE kxp_sequences;
DROP TABLE kxp_endpoints;
DROP TABLE kxp_schemas;
DROP TABLE kxp_audit;
DROP TABLE kxp_portal_links;
DROP TABLE kxp_sessions;
DROP TABLE kxp_accounts;

CREATE TABLE kxp_accounts (
    id                  TEXT PRIMARY KEY,
    name                TEXT NOT NULL,
    api_key_hash        TEXT,                 -- unused: the key's hash is in kxp_api_keys
    default_api_version TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    ops_url             TEXT,
    ops_secret          TEXT,
    contact_email       TEXT
);
INSERT INTO kxp_accounts
    (id, name, api_key_hash, default_api_version, created_at, ops_url, ops_secret, contact_email)
    SELECT id, name, api_key_hash, default_api_version, created_at, ops_url, ops_secret, contact_email
    FROM kxp_accounts_before;

CREATE TABLE kxp_portal_links (
    token_hash   TEXT PRIMARY KEY,         -- SHA-256 hex of the token; the token is never stored
    account_id   TEXT NOT NULL REFERENCES kxp_accounts (id) ON DELETE CASCADE,
    scope        TEXT NOT NULL,            -- manage | read
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER
);
INSERT INTO kxp_portal_links (token_hash, account_id, scope, created_at, expires_at, used_at)
    SELECT token_hash, account_id, scope, created_at, expires_at, used_at FROM kxp_portal_links_before;
CREATE INDEX kxp_portal_links_account ON kxp_portal_links (account_id, expires_at);
CREATE INDEX kxp_portal_links_expiry ON kxp_portal_links (expires_at);

CREATE TABLE kxp_sessions (
    id_hash      TEXT PRIMARY KEY,         -- SHA-256 hex of the cookie's value
    account_id   TEXT REFERENCES kxp_accounts (id) ON DELETE CASCADE,
    operator_id  TEXT REFERENCES kxp_operators (id) ON DELETE CASCADE,
    scope        TEXT NOT NULL,            -- manage | read (operators: manage)
    csrf_token   TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    flash        TEXT,
    CHECK ((account_id IS NULL) <> (operator_id IS NULL))
);
INSERT INTO kxp_sessions (id_hash, account_id, operator_id, scope, csrf_token, created_at, last_seen_at, flash)
    SELECT id_hash, account_id, operator_id, scope, csrf_token, created_at, last_seen_at, flash
    FROM kxp_sessions_before;
CREATE INDEX kxp_sessions_account ON kxp_sessions (account_id);
CREATE INDEX kxp_sessions_created ON kxp_sessions (created_at);
CREATE INDEX kxp_sessions_last_seen ON kxp_sessions (last_seen_at);
CREATE INDEX kxp_sessions_operator ON kxp_sessions (operator_id);

CREATE TABLE kxp_endpoints (
    id                    TEXT NOT NULL,
    account_id            TEXT NOT NULL REFERENCES kxp_accounts (id),
    url                   TEXT NOT NULL,
    description           TEXT NOT NULL DEFAULT '',
    event_types           TEXT NOT NULL,          -- JSON array of types; ["*"] for all
    timeout_ms            INTEGER NOT NULL,
    status                TEXT NOT NULL DEFAULT 'active',
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    api_version           TEXT,
    rate_limit_per_second INTEGER,
    circuit_state         TEXT NOT NULL DEFAULT 'closed',
    circuit_opened_at     INTEGER,
    circuit_probe_at      INTEGER,
    circuit_probe_id      TEXT,
    circuit_failed_probes INTEGER NOT NULL DEFAULT 0,
    confirm_secret_id     INTEGER,                -- a secret of this endpoint (per endpoint ids)
    confirm_needed        INTEGER,
    confirmations         INTEGER NOT NULL DEFAULT 0,
    signing               TEXT NOT NULL DEFAULT 'hmac',
    format                TEXT NOT NULL DEFAULT 'kxp',
    encryption_jwk        TEXT,
    feed_token_hash       TEXT,
    trace_propagation     BOOLEAN NOT NULL DEFAULT 1,
    PRIMARY KEY (account_id, id)
);
INSERT INTO kxp_endpoints
    (id, account_id, url, description, event_types, timeout_ms, status, created_at, updated_at,
     api_version, rate_limit_per_second, circuit_state, circuit_opened_at, circuit_probe_at,
     circuit_probe_id, circuit_failed_probes, confirm_secret_id, confirm_needed, confirmations,
     signing, format, encryption_jwk, feed_token_hash, trace_propagation)
    SELECT id, account_id, url, description, event_types, timeout_ms, status, created_at, updated_at,
     api_version, rate_limit_per_second, circuit_state, circuit_opened_at, circuit_probe_at,
     circuit_probe_id, circuit_failed_probes, confirm_secret_id, confirm_needed, confirmations,
     signing, format, encryption_jwk, feed_token_hash, trace_propagation
    FROM kxp_endpoints_before;
CREATE INDEX kxp_endpoints_probe ON kxp_endpoints (circuit_probe_at) WHERE circuit_state = 'open';

CREATE TABLE kxp_endpoint_secrets (
    id               INTEGER NOT NULL,            -- per endpoint; newest first = highest id
    endpoint_id      TEXT NOT NULL,
    secret           TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER,                     -- NULL: live until rotated out
    last_verified_at INTEGER,
    kind             TEXT NOT NULL DEFAULT 'hmac',
    account_id       TEXT NOT NULL,
    PRIMARY KEY (account_id, endpoint_id, id),
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id) ON DELETE CASCADE
);
INSERT INTO kxp_endpoint_secrets
    (id, endpoint_id, secret, created_at, expires_at, last_verified_at, kind, account_id)
    SELECT s.id, s.endpoint_id, s.secret, s.created_at, s.expires_at, s.last_verified_at, s.kind,
     COALESCE(s.account_id, (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = s.endpoint_id))
    FROM kxp_endpoint_secrets_before s;

CREATE TABLE kxp_deliveries (
    id               TEXT NOT NULL,               -- dlv_<UUIDv7>: time-ordered, so it is the cursor
    account_id       TEXT NOT NULL,
    event_id         TEXT NOT NULL,
    endpoint_id      TEXT NOT NULL,
    status           TEXT NOT NULL,               -- pending | delivering | delivered | dead
    attempts         INTEGER NOT NULL DEFAULT 0,
    first_attempt_at INTEGER,
    next_attempt_at  INTEGER NOT NULL,
    lease_until      INTEGER,
    lease_owner      TEXT,
    last_status      INTEGER,
    last_error       TEXT,
    replayed_by      TEXT,                        -- the delivery that replayed this one
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    sequence         BIGINT,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, event_id) REFERENCES kxp_events (account_id, id),
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id)
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
CREATE INDEX kxp_deliveries_account_event ON kxp_deliveries (account_id, event_id);

CREATE TABLE kxp_attempts (
    id               INTEGER NOT NULL,            -- per delivery
    delivery_id      TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    started_at       INTEGER NOT NULL,
    duration_ms      INTEGER NOT NULL,
    status_code      INTEGER,
    error            TEXT,
    response_snippet TEXT,
    signed_with      TEXT,
    verified_key     TEXT,
    account_id       TEXT NOT NULL,
    PRIMARY KEY (account_id, delivery_id, id),
    FOREIGN KEY (account_id, delivery_id) REFERENCES kxp_deliveries (account_id, id)
);
INSERT INTO kxp_attempts
    (id, delivery_id, attempt, started_at, duration_ms, status_code, error, response_snippet,
     signed_with, verified_key, account_id)
    SELECT a.id, a.delivery_id, a.attempt, a.started_at, a.duration_ms, a.status_code, a.error,
     a.response_snippet, a.signed_with, a.verified_key,
     COALESCE(a.account_id, (SELECT d.account_id FROM kxp_deliveries d WHERE d.id = a.delivery_id))
    FROM kxp_attempts_before a;
CREATE INDEX kxp_attempts_delivery ON kxp_attempts (delivery_id, attempt);
-- Empty, and kept while PostgreSQL keeps its twin (one release more, for the expand release's
-- `--migrate` start): the two schemas stay the same.
CREATE INDEX kxp_attempts_without_account ON kxp_attempts (id) WHERE account_id IS NULL;

CREATE TABLE kxp_endpoint_stats (
    endpoint_id          TEXT NOT NULL,
    consecutive_failures INTEGER NOT NULL,
    last_success_at      INTEGER,                 -- Unix ms
    last_failure_at      INTEGER,                 -- Unix ms
    last_error           TEXT,                    -- of the last failed attempt
    updated_at           INTEGER NOT NULL,
    failing_since        INTEGER,
    account_id           TEXT NOT NULL,
    PRIMARY KEY (account_id, endpoint_id),
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id)
);
INSERT INTO kxp_endpoint_stats
    (endpoint_id, consecutive_failures, last_success_at, last_failure_at, last_error, updated_at,
     failing_since, account_id)
    SELECT s.endpoint_id, s.consecutive_failures, s.last_success_at, s.last_failure_at, s.last_error,
     s.updated_at, s.failing_since,
     COALESCE(s.account_id, (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = s.endpoint_id))
    FROM kxp_endpoint_stats_before s;

CREATE TABLE kxp_endpoint_stats_hourly (
    endpoint_id TEXT NOT NULL,
    hour        INTEGER NOT NULL,
    successes   INTEGER NOT NULL,
    failures    INTEGER NOT NULL,
    le_10       INTEGER NOT NULL,
    le_25       INTEGER NOT NULL,
    le_50       INTEGER NOT NULL,
    le_100      INTEGER NOT NULL,
    le_250      INTEGER NOT NULL,
    le_500      INTEGER NOT NULL,
    le_1000     INTEGER NOT NULL,
    le_2500     INTEGER NOT NULL,
    le_5000     INTEGER NOT NULL,
    le_10000    INTEGER NOT NULL,
    le_30000    INTEGER NOT NULL,
    le_inf      INTEGER NOT NULL,
    account_id  TEXT NOT NULL,
    PRIMARY KEY (account_id, endpoint_id, hour),
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id)
);
INSERT INTO kxp_endpoint_stats_hourly
    (endpoint_id, hour, successes, failures, le_10, le_25, le_50, le_100, le_250, le_500, le_1000,
     le_2500, le_5000, le_10000, le_30000, le_inf, account_id)
    SELECT h.endpoint_id, h.hour, h.successes, h.failures, h.le_10, h.le_25, h.le_50, h.le_100,
     h.le_250, h.le_500, h.le_1000, h.le_2500, h.le_5000, h.le_10000, h.le_30000, h.le_inf,
     COALESCE(h.account_id, (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = h.endpoint_id))
    FROM kxp_endpoint_stats_hourly_before h;
-- Empty, and kept as kxp_attempts_without_account is.
CREATE INDEX kxp_endpoint_stats_hourly_without_account
    ON kxp_endpoint_stats_hourly (endpoint_id, hour) WHERE account_id IS NULL;

CREATE TABLE kxp_schemas (
    id          TEXT NOT NULL,
    account_id  TEXT NOT NULL REFERENCES kxp_accounts (id),
    event_type  TEXT NOT NULL,
    api_version TEXT NOT NULL,
    schema      TEXT NOT NULL,                    -- the JSON Schema document as registered
    revision    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, event_type, api_version)
);
INSERT INTO kxp_schemas
    (id, account_id, event_type, api_version, schema, revision, created_at, updated_at)
    SELECT id, account_id, event_type, api_version, schema, revision, created_at, updated_at
    FROM kxp_schemas_before;

CREATE TABLE kxp_notifications (
    id              TEXT NOT NULL,                -- ntf_<UUIDv7>
    account_id      TEXT NOT NULL REFERENCES kxp_accounts (id),
    endpoint_id     TEXT NOT NULL,
    kind            TEXT NOT NULL,                -- endpoint.circuit_opened | endpoint.disabled
    channel         TEXT NOT NULL,                -- webhook | email
    target          TEXT NOT NULL,                -- the ops URL or the address, at the time
    event_id        TEXT NOT NULL,                -- UUIDv4 shared by the notice's channels
    payload         TEXT NOT NULL,                -- the webhook envelope bytes
    status          TEXT NOT NULL,                -- pending | sent | failed
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER,
    lease_owner     TEXT,                         -- the notifier holding the lease
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id)
);
INSERT INTO kxp_notifications
    (id, account_id, endpoint_id, kind, channel, target, event_id, payload, status, attempts,
     next_attempt_at, lease_until, lease_owner, last_error, created_at, updated_at)
    SELECT id, account_id, endpoint_id, kind, channel, target, event_id, payload, status, attempts,
     next_attempt_at, lease_until, lease_owner, last_error, created_at, updated_at
    FROM kxp_notifications_before;
CREATE INDEX kxp_notifications_account ON kxp_notifications (account_id, id);
CREATE INDEX kxp_notifications_due ON kxp_notifications (next_attempt_at) WHERE status = 'pending';
CREATE INDEX kxp_notifications_finished ON kxp_notifications (updated_at) WHERE status IN ('sent', 'failed');

CREATE TABLE kxp_sequences (
    endpoint_id   TEXT   NOT NULL,
    next_sequence BIGINT NOT NULL,
    account_id    TEXT   NOT NULL,
    PRIMARY KEY (account_id, endpoint_id)
);
-- A sequence row has no foreign key: one whose endpoint is gone is left behind.
INSERT INTO kxp_sequences (endpoint_id, next_sequence, account_id)
    SELECT s.endpoint_id, s.next_sequence,
     COALESCE(s.account_id, (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = s.endpoint_id))
    FROM kxp_sequences_before s
    WHERE COALESCE(s.account_id, (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = s.endpoint_id))
     IS NOT NULL;

CREATE TABLE kxp_audit (
    id          TEXT NOT NULL,            -- aud_<UUIDv7>: time-ordered, so it is the cursor
    at          INTEGER NOT NULL,
    actor_kind  TEXT NOT NULL,            -- operator | account
    actor_id    TEXT NOT NULL,            -- op_… or acc_…
    actor_name  TEXT NOT NULL,            -- the name at the time
    via         TEXT NOT NULL,            -- console | api
    account_id  TEXT NOT NULL,            -- the account acted on (else kxp_operator_audit)
    action      TEXT NOT NULL,            -- endpoint.pause, POST /v1/endpoints, …
    target      TEXT,                     -- the object acted on (an id), if one
    PRIMARY KEY (account_id, id)
);
INSERT INTO kxp_audit (id, at, actor_kind, actor_id, actor_name, via, account_id, action, target)
    SELECT id, at, actor_kind, actor_id, actor_name, via, account_id, action, target
    FROM kxp_audit_before;

INSERT INTO kxp_api_keys (key_hash, account_id, created_at)
    SELECT a.api_key_hash, a.id, a.created_at FROM kxp_accounts a WHERE true
    ON CONFLICT DO NOTHING;
INSERT INTO kxp_endpoint_directory (endpoint_id, account_id)
    SELECT p.id, p.account_id FROM kxp_endpoints p WHERE true
    ON CONFLICT DO NOTHING;

DROP TABLE kxp_endpoints_before;
DROP TABLE kxp_endpoint_secrets_before;
DROP TABLE kxp_deliveries_before;
DROP TABLE kxp_attempts_before;
DROP TABLE kxp_endpoint_stats_before;
DROP TABLE kxp_endpoint_stats_hourly_before;
DROP TABLE kxp_schemas_before;
DROP TABLE kxp_notifications_before;
DROP TABLE kxp_sequences_before;
DROP TABLE kxp_audit_before;
DROP TABLE kxp_accounts_before;
DROP TABLE kxp_portal_links_before;
DROP TABLE kxp_sessions_before;
