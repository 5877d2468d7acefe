-- The account-keyed schema, first step (expand): the five tables that named their rows by an
-- endpoint or a delivery alone gain the account, so that every table of an account's data
-- carries it (docs/design/account-keyed-schema.md). Nullable and without a default: adding the
-- column rewrites nothing, and the previous release, which does not write it, keeps working
-- beside this one during a rolling upgrade. This release writes it on every row it makes.
ALTER TABLE kxp_endpoint_secrets ADD COLUMN account_id TEXT;
ALTER TABLE kxp_attempts ADD COLUMN account_id TEXT;
ALTER TABLE kxp_endpoint_stats ADD COLUMN account_id TEXT;
ALTER TABLE kxp_endpoint_stats_hourly ADD COLUMN account_id TEXT;
ALTER TABLE kxp_sequences ADD COLUMN account_id TEXT;
-- The three tables with a row or a few per endpoint are filled here. The attempts (two or
-- more per delivery) and the hourly tallies (one per endpoint and hour) are filled in batches
-- by `kxp migrate apply`, after the migrations (docs/upgrading.md).
UPDATE kxp_endpoint_secrets s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE p.id = s.endpoint_id AND s.account_id IS NULL;
UPDATE kxp_endpoint_stats s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE p.id = s.endpoint_id AND s.account_id IS NULL;
UPDATE kxp_sequences s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE p.id = s.endpoint_id AND s.account_id IS NULL;
