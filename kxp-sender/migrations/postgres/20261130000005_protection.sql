-- Protecting endpoints and telling merchants about it.
--
-- The circuit breaker lives on the endpoint row: `closed` (deliveries flow), `open` (deliveries
-- are held at next_attempt_at = HELD, burning no attempt, until `circuit_probe_at`), `half_open`
-- (one held delivery, `circuit_probe_id`, is released as a probe; its outcome closes or
-- re-opens the circuit). `status` gains `disabled`: the sender stopped the endpoint after it
-- failed continuously for too long; it holds deliveries like `paused` until resumed.

ALTER TABLE kxp_endpoints ADD COLUMN circuit_state TEXT NOT NULL DEFAULT 'closed';
ALTER TABLE kxp_endpoints ADD COLUMN circuit_opened_at BIGINT;    -- Unix ms, while not closed
ALTER TABLE kxp_endpoints ADD COLUMN circuit_probe_at BIGINT;     -- Unix ms, while open
ALTER TABLE kxp_endpoints ADD COLUMN circuit_probe_id TEXT;        -- the probing delivery
ALTER TABLE kxp_endpoints ADD COLUMN circuit_failed_probes BIGINT NOT NULL DEFAULT 0;
CREATE INDEX kxp_endpoints_probe ON kxp_endpoints (circuit_probe_at) WHERE circuit_state = 'open';

-- When the current run of failures began (NULL after a success): what auto-disable measures.
ALTER TABLE kxp_endpoint_stats ADD COLUMN failing_since BIGINT;

-- Where an account's operational notices go: a webhook signed with `ops_secret` (shown once
-- when the URL is set) and an e-mail address.
ALTER TABLE kxp_accounts ADD COLUMN ops_url TEXT;
ALTER TABLE kxp_accounts ADD COLUMN ops_secret TEXT;
ALTER TABLE kxp_accounts ADD COLUMN contact_email TEXT;

-- The notification outbox: one row per notice and channel, written in the transaction that
-- changes the endpoint's state, so each state change is announced once and a crash cannot
-- lose the announcement.
CREATE TABLE kxp_notifications (
    id              TEXT PRIMARY KEY,              -- ntf_<UUIDv7>
    account_id      TEXT NOT NULL REFERENCES kxp_accounts (id),
    endpoint_id     TEXT NOT NULL REFERENCES kxp_endpoints (id),
    kind            TEXT NOT NULL,                 -- endpoint.circuit_opened | endpoint.disabled
    channel         TEXT NOT NULL,                 -- webhook | email
    target          TEXT NOT NULL,                 -- the ops URL or the address, at the time
    event_id        TEXT NOT NULL,                 -- UUIDv4 shared by the notice's channels
    payload         TEXT NOT NULL,                 -- the webhook envelope bytes
    status          TEXT NOT NULL,                 -- pending | sent | failed
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_until     BIGINT,
    lease_owner     TEXT,                          -- the notifier holding the lease
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX kxp_notifications_due ON kxp_notifications (next_attempt_at) WHERE status = 'pending';
CREATE INDEX kxp_notifications_account ON kxp_notifications (account_id, id);
