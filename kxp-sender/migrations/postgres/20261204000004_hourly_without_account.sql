-- no-transaction
-- The hourly tallies whose account is not filled in yet (as 20261204000003 for attempts).
CREATE INDEX CONCURRENTLY IF NOT EXISTS kxp_endpoint_stats_hourly_without_account
    ON kxp_endpoint_stats_hourly (endpoint_id, hour) WHERE account_id IS NULL;
