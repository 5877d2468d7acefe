-- The account-keyed schema, contract step (docs/design/account-keyed-schema.md). The release
-- before this one (the expand step, 20261204000001 to …11) runs beside it during a rolling
-- upgrade and writes every row's account itself; what is left is what the release before *it*
-- wrote during that earlier rollout, if `kxp migrate apply` was not run again after it: those
-- rows get their account here (row locks only; the large tables' unfilled rows are found
-- through their `…_without_account` partial indexes, which stay one more release so that the
-- expand release's `--migrate` start finds nothing to fill without scanning). Account-less
-- audit rows move to kxp_operator_audit. The triggers that gave the old release's inserts
-- their account go: nothing running inserts without one any more.
UPDATE kxp_attempts a SET account_id = d.account_id
    FROM kxp_deliveries d WHERE a.account_id IS NULL AND d.id = a.delivery_id;
UPDATE kxp_endpoint_stats_hourly h SET account_id = p.account_id
    FROM kxp_endpoints p WHERE h.account_id IS NULL AND p.id = h.endpoint_id;
UPDATE kxp_endpoint_secrets s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE s.account_id IS NULL AND p.id = s.endpoint_id;
UPDATE kxp_endpoint_stats s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE s.account_id IS NULL AND p.id = s.endpoint_id;
UPDATE kxp_sequences s SET account_id = p.account_id
    FROM kxp_endpoints p WHERE s.account_id IS NULL AND p.id = s.endpoint_id;
-- A sequence row has no foreign key: one left without an account belongs to no endpoint.
DELETE FROM kxp_sequences WHERE account_id IS NULL;

INSERT INTO kxp_api_keys (key_hash, account_id, created_at)
    SELECT a.api_key_hash, a.id, a.created_at FROM kxp_accounts a
    ON CONFLICT DO NOTHING;
INSERT INTO kxp_endpoint_directory (endpoint_id, account_id)
    SELECT p.id, p.account_id FROM kxp_endpoints p
    ON CONFLICT DO NOTHING;

INSERT INTO kxp_operator_audit (id, at, actor_kind, actor_id, actor_name, via, action, target)
    SELECT id, at, actor_kind, actor_id, actor_name, via, action, target
    FROM kxp_audit WHERE account_id IS NULL
    ON CONFLICT DO NOTHING;
DELETE FROM kxp_audit WHERE account_id IS NULL;

-- Only the triggers call it, and they go with it:
-- squawk-ignore ban-drop-function
DROP FUNCTION kxp_endpoint_account() CASCADE;
