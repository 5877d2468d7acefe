-- The account-keyed key of kxp_endpoint_stats, as on PostgreSQL; the upserts name it.
CREATE UNIQUE INDEX kxp_endpoint_stats_key ON kxp_endpoint_stats (account_id, endpoint_id);
