-- Endpoint health, kept up to date as attempts finish (in the transaction that records the
-- attempt), so GET /v1/endpoints/{id}/health reads one stats row and at most 25 hourly rows
-- instead of scanning attempts.

CREATE TABLE kxp_endpoint_stats (
    endpoint_id          TEXT PRIMARY KEY REFERENCES kxp_endpoints (id),
    consecutive_failures INTEGER NOT NULL,
    last_success_at      INTEGER,   -- Unix ms
    last_failure_at      INTEGER,   -- Unix ms
    last_error           TEXT,   -- of the last failed attempt
    updated_at           INTEGER NOT NULL
);

-- One row per endpoint and clock hour (start of the hour, Unix ms): attempt counts and a
-- latency histogram in fixed buckets (le_N: duration <= N ms and above the previous bound).
CREATE TABLE kxp_endpoint_stats_hourly (
    endpoint_id TEXT NOT NULL REFERENCES kxp_endpoints (id),
    hour        INTEGER NOT NULL,
    successes   INTEGER NOT NULL,
    failures    INTEGER NOT NULL,
    le_10       INTEGER NOT NULL,
    le_25       INTEGER NOT NULL,
    le_50       INTEGER NOT NULL,
    le_100      INTEGER NOT NULL,
    le_250      INTEGER NOT NULL,
    le_500      INTEGER NOT NULL,
    le_1000     INTEGER NOT NULL,
    le_2500     INTEGER NOT NULL,
    le_5000     INTEGER NOT NULL,
    le_10000    INTEGER NOT NULL,
    le_30000    INTEGER NOT NULL,
    le_inf      INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, hour)
);
