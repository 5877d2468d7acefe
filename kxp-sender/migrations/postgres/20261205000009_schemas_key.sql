-- no-transaction
-- The account-keyed schema, contract step: the account-keyed key of kxp_schemas, built without
-- blocking writes; …0012 makes it the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_schemas_key ON kxp_schemas (account_id, id);
