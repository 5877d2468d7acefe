-- The account-keyed schema, first step (expand): the five tables that named their rows by an
-- endpoint or a delivery alone gain the account, so that every table of an account's data
-- carries it (docs/design/account-keyed-schema.md). Nullable and without a default: adding the
-- column rewrites nothing and holds each table's lock for a moment only, and the previous
-- release, which does not write it, keeps working beside this one during a rolling upgrade.
-- This release writes it on every row it makes; 20261204000006 and `kxp migrate apply` fill
-- the rows written before.
ALTER TABLE kxp_endpoint_secrets ADD COLUMN account_id TEXT;
ALTER TABLE kxp_attempts ADD COLUMN account_id TEXT;
ALTER TABLE kxp_endpoint_stats ADD COLUMN account_id TEXT;
ALTER TABLE kxp_endpoint_stats_hourly ADD COLUMN account_id TEXT;
ALTER TABLE kxp_sequences ADD COLUMN account_id TEXT;
