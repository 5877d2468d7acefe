-- Scopes: every record is keyed by (scope, id). Event ids are unique per sender account, not
-- across accounts, so a receiver serving several accounts keys each route's records apart
-- (`Store::scoped`); existing rows get the empty scope, the default. SQLite cannot change a
-- primary key in place: each table is copied into its new shape (no foreign keys here).

CREATE TABLE kxp_processed_events_scoped (
    scope         TEXT    NOT NULL DEFAULT '',
    event_id      TEXT    NOT NULL,
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
    last_error    TEXT,
    PRIMARY KEY (scope, event_id)
);
INSERT INTO kxp_processed_events_scoped
    (event_id, status, attempts, locked_until, first_seen_at, updated_at, last_error)
    SELECT event_id, status, attempts, locked_until, first_seen_at, updated_at, last_error
    FROM kxp_processed_events;
DROP TABLE kxp_processed_events;
ALTER TABLE kxp_processed_events_scoped RENAME TO kxp_processed_events;
CREATE INDEX kxp_processed_events_updated_at ON kxp_processed_events (updated_at);

CREATE TABLE kxp_inbox_scoped (
    scope        TEXT    NOT NULL DEFAULT '',
    event_id     TEXT    NOT NULL,
    payload      BLOB    NOT NULL,
    received_at  INTEGER NOT NULL,
    -- Not due before this time: pushed back after each failure so a poison item cannot spin.
    available_at INTEGER NOT NULL,
    -- Set in the same transaction that marks the event done.
    done_at      INTEGER,
    PRIMARY KEY (scope, event_id)
);
INSERT INTO kxp_inbox_scoped (event_id, payload, received_at, available_at, done_at)
    SELECT event_id, payload, received_at, available_at, done_at FROM kxp_inbox;
DROP TABLE kxp_inbox;
ALTER TABLE kxp_inbox_scoped RENAME TO kxp_inbox;
CREATE INDEX kxp_inbox_due ON kxp_inbox (scope, available_at) WHERE done_at IS NULL;
CREATE INDEX kxp_inbox_done_at ON kxp_inbox (done_at) WHERE done_at IS NOT NULL;

CREATE TABLE kxp_checkpoints_scoped (
    scope       TEXT    NOT NULL DEFAULT '',
    endpoint_id TEXT    NOT NULL,
    sequence    INTEGER NOT NULL CHECK (sequence >= 0),
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (scope, endpoint_id)
);
INSERT INTO kxp_checkpoints_scoped (endpoint_id, sequence, updated_at)
    SELECT endpoint_id, sequence, updated_at FROM kxp_checkpoints;
DROP TABLE kxp_checkpoints;
ALTER TABLE kxp_checkpoints_scoped RENAME TO kxp_checkpoints;

CREATE TABLE kxp_held_events_scoped (
    scope       TEXT    NOT NULL DEFAULT '',
    event_id    TEXT    NOT NULL,
    endpoint_id TEXT    NOT NULL,
    payload     BLOB    NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (scope, event_id)
);
INSERT INTO kxp_held_events_scoped (event_id, endpoint_id, payload, received_at)
    SELECT event_id, endpoint_id, payload, received_at FROM kxp_held_events;
DROP TABLE kxp_held_events;
ALTER TABLE kxp_held_events_scoped RENAME TO kxp_held_events;
CREATE INDEX kxp_held_events_endpoint ON kxp_held_events (scope, endpoint_id);
