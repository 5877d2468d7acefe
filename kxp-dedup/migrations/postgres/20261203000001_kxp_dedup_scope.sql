-- Scopes: every record is keyed by (scope, id). Event ids are unique per sender account, not
-- across accounts, so a receiver serving several accounts keys each route's records apart
-- (`Store::scoped`); existing rows get the empty scope, the default. Adding a column with a
-- constant default rewrites nothing; each new primary key is built as a unique index first.

ALTER TABLE kxp_processed_events ADD COLUMN scope text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX kxp_processed_events_scoped ON kxp_processed_events (scope, event_id);
ALTER TABLE kxp_processed_events DROP CONSTRAINT kxp_processed_events_pkey,
    ADD CONSTRAINT kxp_processed_events_pkey PRIMARY KEY USING INDEX kxp_processed_events_scoped;

ALTER TABLE kxp_inbox ADD COLUMN scope text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX kxp_inbox_scoped ON kxp_inbox (scope, event_id);
ALTER TABLE kxp_inbox DROP CONSTRAINT kxp_inbox_pkey,
    ADD CONSTRAINT kxp_inbox_pkey PRIMARY KEY USING INDEX kxp_inbox_scoped;
DROP INDEX kxp_inbox_due;
CREATE INDEX kxp_inbox_due ON kxp_inbox (scope, available_at) WHERE done_at IS NULL;

ALTER TABLE kxp_checkpoints ADD COLUMN scope text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX kxp_checkpoints_scoped ON kxp_checkpoints (scope, endpoint_id);
ALTER TABLE kxp_checkpoints DROP CONSTRAINT kxp_checkpoints_pkey,
    ADD CONSTRAINT kxp_checkpoints_pkey PRIMARY KEY USING INDEX kxp_checkpoints_scoped;

ALTER TABLE kxp_held_events ADD COLUMN scope text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX kxp_held_events_scoped ON kxp_held_events (scope, event_id);
ALTER TABLE kxp_held_events DROP CONSTRAINT kxp_held_events_pkey,
    ADD CONSTRAINT kxp_held_events_pkey PRIMARY KEY USING INDEX kxp_held_events_scoped;
DROP INDEX kxp_held_events_endpoint;
CREATE INDEX kxp_held_events_endpoint ON kxp_held_events (scope, endpoint_id);
