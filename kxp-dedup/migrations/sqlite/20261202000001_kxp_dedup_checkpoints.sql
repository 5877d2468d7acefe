-- The catch-up checkpoint: per sender endpoint, the highest number of its sequence up to which
-- every event is processed (kxp-catchup advances it over a contiguous processed prefix only).
-- In this database, beside the processed events, so a restored backup restores both together.
CREATE TABLE kxp_checkpoints (
    endpoint_id TEXT    NOT NULL PRIMARY KEY,
    sequence    INTEGER NOT NULL CHECK (sequence >= 0),
    updated_at  INTEGER NOT NULL
);
