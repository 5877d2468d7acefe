-- The ordered inbox (kxp-catchup's ordered mode): a verified delivery, recorded here before it
-- is answered 200, waits for its turn in its endpoint's sequence; the catch-up hands the events
-- to the handler in order, from the feed, and deletes these rows once dedup records them done.
CREATE TABLE kxp_held_events (
    event_id    TEXT    NOT NULL PRIMARY KEY,
    endpoint_id TEXT    NOT NULL,
    payload     BLOB    NOT NULL,
    received_at INTEGER NOT NULL
);
CREATE INDEX kxp_held_events_endpoint ON kxp_held_events (endpoint_id);
