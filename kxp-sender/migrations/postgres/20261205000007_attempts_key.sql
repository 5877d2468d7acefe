-- no-transaction
-- The account-keyed schema, contract step: the account-keyed key of kxp_attempts, built without
-- blocking writes; …0012 makes it the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_attempts_key ON kxp_attempts (account_id, delivery_id, id);
