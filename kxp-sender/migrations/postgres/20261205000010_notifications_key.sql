-- no-transaction
-- The account-keyed schema, contract step: the account-keyed key of kxp_notifications, built without
-- blocking writes; …0012 makes it the primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_notifications_key ON kxp_notifications (account_id, id);
