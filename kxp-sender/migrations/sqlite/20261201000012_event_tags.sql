-- Events' tags (`POST /v1/events` with `"tags": ["order:1234", …]`): the platform's own labels,
-- to find an account's events by (`GET /v1/events?tag=…`, the console's search). One row per
-- event and tag. The account and the event's creation time are copied in, so "account A's events
-- tagged T, newest first, after the cursor (created_at, id)" is one range of one index, read
-- backwards, whatever the number of events. Deleting an event (retention) deletes its tags, found
-- by the primary key.
CREATE TABLE kxp_event_tags (
    event_id   TEXT NOT NULL REFERENCES kxp_events (id) ON DELETE CASCADE,
    tag        TEXT NOT NULL,                 -- 1 to 64 printable ASCII characters, no spaces
    account_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,              -- the event's
    PRIMARY KEY (event_id, tag)
);
CREATE INDEX kxp_event_tags_search ON kxp_event_tags (account_id, tag, created_at, event_id);

-- `GET /v1/events` without a tag: the account's events newest first, after the cursor.
CREATE INDEX kxp_events_account_created ON kxp_events (account_id, created_at, id);
