-- no-transaction
-- The account-keyed key of kxp_endpoint_stats (the contract step makes it the primary key); this
-- release's upserts name it.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_endpoint_stats_key ON kxp_endpoint_stats (account_id, endpoint_id);
