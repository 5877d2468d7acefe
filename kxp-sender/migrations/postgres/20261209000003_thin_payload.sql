-- Thin events (issue 37): `payload_mode`, what an endpoint's deliveries carry: `full` (the
-- envelope; every endpoint before this migration, and the default) or `thin` (a notice with the
-- event's id, type, version and time; the receiver fetches the envelope with the feed's
-- credentials). A constant default: the catalog changes, no row is rewritten.
ALTER TABLE kxp_endpoints ADD COLUMN payload_mode TEXT NOT NULL DEFAULT 'full';
