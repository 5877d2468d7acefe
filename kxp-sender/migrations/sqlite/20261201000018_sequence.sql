-- A sequence number per endpoint (1, 2, 3, … with no holes, in commit order): the next number
-- each endpoint gives out, and each delivery's number. Numbers are given after ingestion
-- commits, by one sequencer per endpoint at a time (store/sequence.rs); a replay carries its
-- original's number, so the number belongs to the (endpoint, event) pair, not to the row, and
-- is not unique per row. NULL: not numbered yet.
ALTER TABLE kxp_endpoints ADD COLUMN next_sequence BIGINT NOT NULL DEFAULT 1;
ALTER TABLE kxp_deliveries ADD COLUMN sequence BIGINT;
-- What the sequencer numbers next, oldest first; small, as rows leave it within a poll. A
-- replayed delivery is never numbered: its replay carries the (endpoint, event)'s number.
CREATE INDEX kxp_deliveries_unnumbered ON kxp_deliveries (endpoint_id, created_at, id)
    WHERE sequence IS NULL AND replayed_by IS NULL;
-- The feed: an endpoint's deliveries by number.
CREATE INDEX kxp_deliveries_sequence ON kxp_deliveries (endpoint_id, sequence)
    WHERE sequence IS NOT NULL;
-- The hash (SHA-256 hex) of the endpoint's feed token, `Authorization: Bearer kxpft_…` on its
-- catch-up feed: for receivers that hold no HMAC secret (Ed25519 endpoints). NULL: none.
ALTER TABLE kxp_endpoints ADD COLUMN feed_token_hash TEXT;
