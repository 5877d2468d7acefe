-- The account-keyed key of kxp_endpoint_stats_hourly, as on PostgreSQL; the upserts name it.
CREATE UNIQUE INDEX kxp_endpoint_stats_hourly_key
    ON kxp_endpoint_stats_hourly (account_id, endpoint_id, hour);
