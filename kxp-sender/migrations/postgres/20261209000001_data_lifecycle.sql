-- Personal data's lifecycle (issue 37).
--
-- kxp_events: `payload_expires_at`, when the event's payload goes (Unix ms; NULL: it lives as
-- long as the event, until the global retention), from `retention_days` at ingestion.
-- `payload_gone`: NULL while the payload is held, else why it is not: `expired` (its
-- retention passed) or `erased` (an erasure by tag, `erasure_id`). A gone event keeps its id,
-- type, times and deliveries' outcomes; its `payload` is '' and its attempts' response
-- snippets NULL.
-- kxp_deliveries: `dead_notice_at`, when the merchant was told the dead delivery is about to
-- go (`--dead-letter-retention`): one goes a day after its notice at the earliest. A delivery
-- whose event's payload is gone before it was delivered ends `erased` or `expired`.
-- kxp_erasures: one row per `POST /v1/erasures`, kept as the record of who erased which tag
-- when (the tag, never the data); `events` counts the events it erased, batch by batch. On
-- Citus it is distributed by account with the other account tables, by the step that follows
-- every apply (store/distribute.rs lists it).
-- Nullable columns without defaults: catalog changes only, no row is rewritten.
ALTER TABLE kxp_events ADD COLUMN payload_expires_at BIGINT;
ALTER TABLE kxp_events ADD COLUMN payload_gone TEXT;
ALTER TABLE kxp_events ADD COLUMN erasure_id TEXT;
ALTER TABLE kxp_deliveries ADD COLUMN dead_notice_at BIGINT;

CREATE TABLE kxp_erasures (
    account_id  TEXT NOT NULL REFERENCES kxp_accounts (id),
    id          TEXT NOT NULL,            -- er_<UUIDv7>: time-ordered
    tag         TEXT NOT NULL,
    status      TEXT NOT NULL,            -- running | done
    events      BIGINT NOT NULL DEFAULT 0,
    actor_kind  TEXT NOT NULL,            -- account | operator
    actor_id    TEXT NOT NULL,            -- acc_… or op_…
    actor_name  TEXT NOT NULL,            -- the name at the time
    via         TEXT NOT NULL,            -- api | console
    created_at  BIGINT NOT NULL,
    finished_at BIGINT,
    PRIMARY KEY (account_id, id)
);
-- What the workers and the erasure loop look for: the few erasures still running.
CREATE INDEX kxp_erasures_running ON kxp_erasures (account_id, tag) WHERE status = 'running';
