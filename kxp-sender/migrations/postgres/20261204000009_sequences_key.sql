-- no-transaction
-- The account-keyed key of kxp_sequences (the contract step makes it the primary key); this
-- release's upserts name it.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS kxp_sequences_key ON kxp_sequences (account_id, endpoint_id);
