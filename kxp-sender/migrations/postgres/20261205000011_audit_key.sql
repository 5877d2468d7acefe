-- no-transaction
-- The account-keyed schema, contract step: the account-keyed key of kxp_audit, built without
-- blocking writes; …0012 makes it the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_audit_key ON kxp_audit (account_id, id);
