-- no-transaction
-- The account-keyed schema, contract step: the account-keyed key of kxp_endpoints, built without
-- blocking writes; …0012 makes it the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_endpoints_key ON kxp_endpoints (account_id, id);
