-- The account-keyed schema, expand step: the rows of the small per-endpoint tables written
-- before 20261204000005's triggers get their endpoint's account (a row or a few per endpoint:
-- one statement each, with row locks only), and so do the hourly tallies an upsert may still
-- add to (this hour's and the last; `kxp migrate apply` fills the older ones in batches).
UPDATE kxp_endpoint_secrets s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE p.id = s.endpoint_id AND s.account_id IS NULL;
UPDATE kxp_endpoint_stats s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE p.id = s.endpoint_id AND s.account_id IS NULL;
UPDATE kxp_sequences s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE p.id = s.endpoint_id AND s.account_id IS NULL;
UPDATE kxp_endpoint_stats_hourly h SET account_id = p.account_id
    FROM kxp_endpoints p
    WHERE p.id = h.endpoint_id AND h.account_id IS NULL
    AND h.hour >= (extract(epoch FROM now()) * 1000)::bigint - 7200000;
