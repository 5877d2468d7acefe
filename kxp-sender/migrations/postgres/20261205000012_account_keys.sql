-- The account-keyed schema, contract step: every key leads with the account. Each table's
-- account-keyed unique index (built CONCURRENTLY by …0005 to …0011, and …0007 to …0009 of the
-- expand step) becomes its primary key, and the foreign keys between account tables name the
-- account: added NOT VALID (no scan here), validated by …0013 without blocking writes. The
-- identities go: attempts are numbered per delivery and secrets per endpoint, as the release
-- before this one already does once the identity is gone (its `COALESCE(nextval(…), MAX + 1)`).
-- Every statement here changes the catalogue only, so the locks it takes (all of them until
-- COMMIT) last a moment; the runner's lock timeout rolls it back rather than queue writes behind it.
-- Each constraint dropped is replaced by a stronger one in the same transaction, and no
-- release inserts through the identities (the one before this one gives every id itself):
-- squawk-ignore-file ban-drop-constraint
-- squawk-ignore-file ban-alter-identity

-- The foreign keys that refer to the single-column keys about to go.
ALTER TABLE kxp_attempts DROP CONSTRAINT kxp_attempts_delivery_id_fkey;
ALTER TABLE kxp_deliveries DROP CONSTRAINT kxp_deliveries_endpoint_id_fkey;
ALTER TABLE kxp_endpoint_secrets DROP CONSTRAINT kxp_endpoint_secrets_endpoint_id_fkey;
ALTER TABLE kxp_endpoint_stats DROP CONSTRAINT kxp_endpoint_stats_endpoint_id_fkey;
ALTER TABLE kxp_endpoint_stats_hourly DROP CONSTRAINT kxp_endpoint_stats_hourly_endpoint_id_fkey;
ALTER TABLE kxp_notifications DROP CONSTRAINT kxp_notifications_endpoint_id_fkey;

ALTER TABLE kxp_endpoints DROP CONSTRAINT kxp_endpoints_pkey;
ALTER TABLE kxp_endpoints ADD CONSTRAINT kxp_endpoints_pkey PRIMARY KEY USING INDEX kxp_endpoints_key;
ALTER TABLE kxp_deliveries DROP CONSTRAINT kxp_deliveries_pkey;
ALTER TABLE kxp_deliveries ADD CONSTRAINT kxp_deliveries_pkey PRIMARY KEY USING INDEX kxp_deliveries_key;
ALTER TABLE kxp_attempts DROP CONSTRAINT kxp_attempts_pkey;
ALTER TABLE kxp_attempts ADD CONSTRAINT kxp_attempts_pkey PRIMARY KEY USING INDEX kxp_attempts_key;
ALTER TABLE kxp_endpoint_secrets DROP CONSTRAINT kxp_endpoint_secrets_pkey;
ALTER TABLE kxp_endpoint_secrets ADD CONSTRAINT kxp_endpoint_secrets_pkey
    PRIMARY KEY USING INDEX kxp_endpoint_secrets_key;
ALTER TABLE kxp_endpoint_stats DROP CONSTRAINT kxp_endpoint_stats_pkey;
ALTER TABLE kxp_endpoint_stats ADD CONSTRAINT kxp_endpoint_stats_pkey
    PRIMARY KEY USING INDEX kxp_endpoint_stats_key;
ALTER TABLE kxp_endpoint_stats_hourly DROP CONSTRAINT kxp_endpoint_stats_hourly_pkey;
ALTER TABLE kxp_endpoint_stats_hourly ADD CONSTRAINT kxp_endpoint_stats_hourly_pkey
    PRIMARY KEY USING INDEX kxp_endpoint_stats_hourly_key;
ALTER TABLE kxp_sequences DROP CONSTRAINT kxp_sequences_pkey;
ALTER TABLE kxp_sequences ADD CONSTRAINT kxp_sequences_pkey PRIMARY KEY USING INDEX kxp_sequences_key;
ALTER TABLE kxp_schemas DROP CONSTRAINT kxp_schemas_pkey;
ALTER TABLE kxp_schemas ADD CONSTRAINT kxp_schemas_pkey PRIMARY KEY USING INDEX kxp_schemas_key;
ALTER TABLE kxp_notifications DROP CONSTRAINT kxp_notifications_pkey;
ALTER TABLE kxp_notifications ADD CONSTRAINT kxp_notifications_pkey
    PRIMARY KEY USING INDEX kxp_notifications_key;
ALTER TABLE kxp_audit DROP CONSTRAINT kxp_audit_pkey;
ALTER TABLE kxp_audit ADD CONSTRAINT kxp_audit_pkey PRIMARY KEY USING INDEX kxp_audit_key;

ALTER TABLE kxp_attempts ALTER COLUMN id DROP IDENTITY;
ALTER TABLE kxp_endpoint_secrets ALTER COLUMN id DROP IDENTITY;

ALTER TABLE kxp_attempts ADD CONSTRAINT kxp_attempts_delivery_fkey
    FOREIGN KEY (account_id, delivery_id) REFERENCES kxp_deliveries (account_id, id) NOT VALID;
ALTER TABLE kxp_deliveries ADD CONSTRAINT kxp_deliveries_endpoint_fkey
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id) NOT VALID;
ALTER TABLE kxp_endpoint_secrets ADD CONSTRAINT kxp_endpoint_secrets_endpoint_fkey
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id)
    ON DELETE CASCADE NOT VALID;
ALTER TABLE kxp_endpoint_stats ADD CONSTRAINT kxp_endpoint_stats_endpoint_fkey
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id) NOT VALID;
ALTER TABLE kxp_endpoint_stats_hourly ADD CONSTRAINT kxp_endpoint_stats_hourly_endpoint_fkey
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id) NOT VALID;
ALTER TABLE kxp_notifications ADD CONSTRAINT kxp_notifications_endpoint_fkey
    FOREIGN KEY (account_id, endpoint_id) REFERENCES kxp_endpoints (account_id, id) NOT VALID;
