-- The account-keyed schema, contract step: …0012's foreign keys validated, a scan of each
-- table that blocks no writes.
ALTER TABLE kxp_attempts VALIDATE CONSTRAINT kxp_attempts_delivery_fkey;
ALTER TABLE kxp_deliveries VALIDATE CONSTRAINT kxp_deliveries_endpoint_fkey;
ALTER TABLE kxp_endpoint_secrets VALIDATE CONSTRAINT kxp_endpoint_secrets_endpoint_fkey;
ALTER TABLE kxp_endpoint_stats VALIDATE CONSTRAINT kxp_endpoint_stats_endpoint_fkey;
ALTER TABLE kxp_endpoint_stats_hourly VALIDATE CONSTRAINT kxp_endpoint_stats_hourly_endpoint_fkey;
ALTER TABLE kxp_notifications VALIDATE CONSTRAINT kxp_notifications_endpoint_fkey;
