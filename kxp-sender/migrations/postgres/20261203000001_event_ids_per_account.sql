-- A producer-chosen event id is unique within its account, not across accounts: the key of
-- kxp_events becomes (account_id, id), and what refers to an event refers to it by both. Before
-- this, account B posting account A's id learnt that the id existed somewhere, and B posting an id
-- first made A's later event with that id be refused for good (security round 2, item 1).
--
-- One transaction: the new unique indexes are built while kxp_events, kxp_event_tags and
-- kxp_deliveries are locked against writes, so the upgrade stops ingestion for as long as they
-- take to build (docs/upgrading.md has the measured figure).

CREATE UNIQUE INDEX kxp_events_account_id_key ON kxp_events (account_id, id);
ALTER TABLE kxp_deliveries DROP CONSTRAINT kxp_deliveries_event_id_fkey;
ALTER TABLE kxp_event_tags DROP CONSTRAINT kxp_event_tags_event_id_fkey;
ALTER TABLE kxp_events DROP CONSTRAINT kxp_events_pkey;
ALTER TABLE kxp_events ADD CONSTRAINT kxp_events_pkey PRIMARY KEY USING INDEX kxp_events_account_id_key;
-- The same columns as the key: no longer needed.
DROP INDEX kxp_events_account;

CREATE UNIQUE INDEX kxp_event_tags_key ON kxp_event_tags (account_id, event_id, tag);
ALTER TABLE kxp_event_tags DROP CONSTRAINT kxp_event_tags_pkey;
ALTER TABLE kxp_event_tags ADD CONSTRAINT kxp_event_tags_pkey PRIMARY KEY USING INDEX kxp_event_tags_key;

CREATE INDEX kxp_deliveries_account_event ON kxp_deliveries (account_id, event_id);
DROP INDEX kxp_deliveries_event;

ALTER TABLE kxp_deliveries ADD CONSTRAINT kxp_deliveries_event_fkey
    FOREIGN KEY (account_id, event_id) REFERENCES kxp_events (account_id, id);
ALTER TABLE kxp_event_tags ADD CONSTRAINT kxp_event_tags_event_fkey
    FOREIGN KEY (account_id, event_id) REFERENCES kxp_events (account_id, id) ON DELETE CASCADE;
