-- The sequencer's own row per endpoint, apart from kxp_endpoints: the next number it gives.
-- Ingestion reads the account's endpoint rows FOR SHARE (PostgreSQL) while it queues
-- deliveries; a sequencer that locked and updated those rows made ingestion wait for it, and
-- skipped (SKIP LOCKED) every endpoint an ingestion was reading, so under steady ingestion
-- numbering fell behind and deliveries waited for their numbers (BENCHMARKS.md, "The
-- sequencer's cost"). A row here is made by the first pass that numbers the endpoint.
CREATE TABLE kxp_sequences (
    endpoint_id   TEXT   NOT NULL PRIMARY KEY,
    next_sequence BIGINT NOT NULL
);
INSERT INTO kxp_sequences (endpoint_id, next_sequence)
    SELECT id, next_sequence FROM kxp_endpoints WHERE next_sequence > 1;
ALTER TABLE kxp_endpoints DROP COLUMN next_sequence;
