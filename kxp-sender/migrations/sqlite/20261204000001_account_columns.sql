-- The account-keyed schema, first step: the five tables that named their rows by an endpoint
-- or a delivery alone gain the account (docs/design/account-keyed-schema.md), nullable as on
-- PostgreSQL, where the previous release may still write rows without it during a rolling
-- upgrade. SQLite has one process, which runs this before serving: every row is filled here.
ALTER TABLE kxp_endpoint_secrets ADD COLUMN account_id TEXT;
ALTER TABLE kxp_attempts ADD COLUMN account_id TEXT;
ALTER TABLE kxp_endpoint_stats ADD COLUMN account_id TEXT;
ALTER TABLE kxp_endpoint_stats_hourly ADD COLUMN account_id TEXT;
ALTER TABLE kxp_sequences ADD COLUMN account_id TEXT;
UPDATE kxp_endpoint_secrets SET account_id =
    (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_endpoint_secrets.endpoint_id);
UPDATE kxp_endpoint_stats SET account_id =
    (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_endpoint_stats.endpoint_id);
UPDATE kxp_endpoint_stats_hourly SET account_id =
    (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_endpoint_stats_hourly.endpoint_id);
UPDATE kxp_sequences SET account_id =
    (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = kxp_sequences.endpoint_id);
UPDATE kxp_attempts SET account_id =
    (SELECT d.account_id FROM kxp_deliveries d WHERE d.id = kxp_attempts.delivery_id);
