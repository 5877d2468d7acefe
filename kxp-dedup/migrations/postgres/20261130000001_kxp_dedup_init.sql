-- kxp-dedup schema for PostgreSQL (see ARCHITECTURE.md, "Dedup (kxp-dedup)").
--
-- Every time is the database server's `now()`, never the application's clock: several receiver
-- processes on several machines then agree on when a lease ends, whatever their clock skew.

-- One row per event id a receiver has seen.
CREATE TABLE kxp_processed_events (
    event_id      text        PRIMARY KEY,
    -- 'processing': claimed, lease until locked_until; 'done': processed, never again;
    -- 'failed': the handler failed, the next delivery may claim it.
    status        text        NOT NULL CHECK (status IN ('processing', 'done', 'failed')),
    -- How many times the event was claimed (or marked, in in-transaction mode).
    attempts      integer     NOT NULL DEFAULT 1,
    -- End of the lease of a 'processing' row; NULL otherwise.
    locked_until  timestamptz,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- The most recent handler error, kept after a later success for the record.
    last_error    text
);

-- Retention: `purge` deletes by age of the last change.
CREATE INDEX kxp_processed_events_updated_at ON kxp_processed_events (updated_at);

-- Inbox mode: verified payloads stored before answering 200, processed later by a worker. The
-- processing state of an item lives in kxp_processed_events, under the same claim rules.
CREATE TABLE kxp_inbox (
    event_id     text        PRIMARY KEY,
    payload      bytea       NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    -- Not due before this time: pushed back after each failure so a poison item cannot spin.
    available_at timestamptz NOT NULL DEFAULT now(),
    -- Set in the same transaction that marks the event done.
    done_at      timestamptz
);

-- The worker's query: due items that are not done.
CREATE INDEX kxp_inbox_due ON kxp_inbox (available_at) WHERE done_at IS NULL;
-- Retention of processed items.
CREATE INDEX kxp_inbox_done_at ON kxp_inbox (done_at) WHERE done_at IS NOT NULL;
