-- no-transaction
-- The account-keyed schema, contract step: the account-keyed key of kxp_endpoint_secrets, built without
-- blocking writes; …0012 makes it the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_endpoint_secrets_key ON kxp_endpoint_secrets (account_id, endpoint_id, id);
