-- no-transaction
-- The attempts whose account is not filled in yet: every attempt before 20261204000001, and
-- those the previous release writes during a rolling upgrade. `kxp migrate apply` fills them
-- in batches through this index, which holds only them, so the work (and each later run that
-- finds nothing) costs what is left, not the table. Dropped with the account-keyed schema's
-- contract step, once every row has its account.
CREATE INDEX CONCURRENTLY IF NOT EXISTS kxp_attempts_without_account ON kxp_attempts (id) WHERE account_id IS NULL;
