-- no-transaction
-- The account-keyed schema, contract step: the account-keyed key of kxp_deliveries, built without
-- blocking writes; …0012 makes it the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_deliveries_key ON kxp_deliveries (account_id, id);
