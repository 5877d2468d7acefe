-- The account-keyed key of kxp_sequences, as on PostgreSQL; the upserts name it.
CREATE UNIQUE INDEX kxp_sequences_key ON kxp_sequences (account_id, endpoint_id);
