-- Endpoint health, kept up to date as attempts finish (in the transaction that records the
-- attempt), so GET /v1/endpoints/{id}/health reads one stats row and at most 25 hourly rows
-- instead of scanning attempts.

CREATE TABLE kxp_endpoint_stats (
    endpoint_id          TEXT PRIMARY KEY REFERENCES kxp_endpoints (id),
    consecutive_failures BIGINT NOT NULL,
    last_success_at      BIGINT,   -- Unix ms
    last_failure_at      BIGINT,   -- Unix ms
    last_error           TEXT,   -- of the last failed attempt
    updated_at           BIGINT NOT NULL
);

-- One row per endpoint and clock hour (start of the hour, Unix ms): attempt counts and a
-- latency histogram in fixed buckets (le_N: duration <= N ms and above the previous bound).
CREATE TABLE kxp_endpoint_stats_hourly (
    endpoint_id TEXT NOT NULL REFERENCES kxp_endpoints (id),
    hour        BIGINT NOT NULL,
    successes   BIGINT NOT NULL,
    failures    BIGINT NOT NULL,
    le_10       BIGINT NOT NULL,
    le_25       BIGINT NOT NULL,
    le_50       BIGINT NOT NULL,
    le_100      BIGINT NOT NULL,
    le_250      BIGINT NOT NULL,
    le_500      BIGINT NOT NULL,
    le_1000     BIGINT NOT NULL,
    le_2500     BIGINT NOT NULL,
    le_5000     BIGINT NOT NULL,
    le_10000    BIGINT NOT NULL,
    le_30000    BIGINT NOT NULL,
    le_inf      BIGINT NOT NULL,
    PRIMARY KEY (endpoint_id, hour)
);
