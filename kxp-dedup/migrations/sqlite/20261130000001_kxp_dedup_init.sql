-- kxp-dedup schema for SQLite (see ARCHITECTURE.md, "Dedup (kxp-dedup)").
--
-- Times are INTEGER milliseconds since the Unix epoch, always computed in SQL from SQLite's own
-- clock (`unixepoch('subsec')`, SQLite 3.42 or newer; sqlx bundles 3.46), never passed in by the
-- application, so every comparison uses one clock.

-- One row per event id a receiver has seen.
CREATE TABLE kxp_processed_events (
    event_id      TEXT    NOT NULL PRIMARY KEY,
    -- 'processing': claimed, lease until locked_until; 'done': processed, never again;
    -- 'failed': the handler failed, the next delivery may claim it.
    status        TEXT    NOT NULL CHECK (status IN ('processing', 'done', 'failed')),
    -- How many times the event was claimed (or marked, in in-transaction mode).
    attempts      INTEGER NOT NULL DEFAULT 1,
    -- End of the lease of a 'processing' row; NULL otherwise.
    locked_until  INTEGER,
    first_seen_at INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    -- The most recent handler error, kept after a later success for the record.
    last_error    TEXT
);

-- Retention: `purge` deletes by age of the last change.
CREATE INDEX kxp_processed_events_updated_at ON kxp_processed_events (updated_at);

-- Inbox mode: verified payloads stored before answering 200, processed later by a worker. The
-- processing state of an item lives in kxp_processed_events, under the same claim rules.
CREATE TABLE kxp_inbox (
    event_id     TEXT    NOT NULL PRIMARY KEY,
    payload      BLOB    NOT NULL,
    received_at  INTEGER NOT NULL,
    -- Not due before this time: pushed back after each failure so a poison item cannot spin.
    available_at INTEGER NOT NULL,
    -- Set in the same transaction that marks the event done.
    done_at      INTEGER
);

-- The worker's query: due items that are not done.
CREATE INDEX kxp_inbox_due ON kxp_inbox (available_at) WHERE done_at IS NULL;
-- Retention of processed items.
CREATE INDEX kxp_inbox_done_at ON kxp_inbox (done_at) WHERE done_at IS NOT NULL;
