-- The account-keyed schema, contract step: `account_id` becomes NOT NULL on the six tables that
-- had it nullable. `SET NOT NULL` alone scans the table under a lock that blocks reads and
-- writes; a CHECK added NOT VALID (here, a moment's lock), validated without blocking writes
-- (…0003), lets `SET NOT NULL` (…0004) skip the scan.
ALTER TABLE kxp_attempts ADD CONSTRAINT kxp_attempts_account_set
    CHECK (account_id IS NOT NULL) NOT VALID;
ALTER TABLE kxp_endpoint_secrets ADD CONSTRAINT kxp_endpoint_secrets_account_set
    CHECK (account_id IS NOT NULL) NOT VALID;
ALTER TABLE kxp_endpoint_stats ADD CONSTRAINT kxp_endpoint_stats_account_set
    CHECK (account_id IS NOT NULL) NOT VALID;
ALTER TABLE kxp_endpoint_stats_hourly ADD CONSTRAINT kxp_endpoint_stats_hourly_account_set
    CHECK (account_id IS NOT NULL) NOT VALID;
ALTER TABLE kxp_sequences ADD CONSTRAINT kxp_sequences_account_set
    CHECK (account_id IS NOT NULL) NOT VALID;
ALTER TABLE kxp_audit ADD CONSTRAINT kxp_audit_account_set
    CHECK (account_id IS NOT NULL) NOT VALID;
