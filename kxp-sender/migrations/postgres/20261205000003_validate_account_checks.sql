-- The account-keyed schema, contract step: the checks of …0002 validated, a scan of each table
-- that blocks no writes (SHARE UPDATE EXCLUSIVE).
ALTER TABLE kxp_attempts VALIDATE CONSTRAINT kxp_attempts_account_set;
ALTER TABLE kxp_endpoint_secrets VALIDATE CONSTRAINT kxp_endpoint_secrets_account_set;
ALTER TABLE kxp_endpoint_stats VALIDATE CONSTRAINT kxp_endpoint_stats_account_set;
ALTER TABLE kxp_endpoint_stats_hourly VALIDATE CONSTRAINT kxp_endpoint_stats_hourly_account_set;
ALTER TABLE kxp_sequences VALIDATE CONSTRAINT kxp_sequences_account_set;
ALTER TABLE kxp_audit VALIDATE CONSTRAINT kxp_audit_account_set;
