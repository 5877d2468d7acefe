-- The account-keyed schema, expand step: during a rolling upgrade the previous release goes on
-- inserting rows of the small per-endpoint tables without their account. These triggers give
-- such a row its endpoint's account as it is inserted, so that every row of these tables has
-- one from now on (20261204000001 filled those before it, and this fills the hourly tallies of
-- the last two hours; `kxp migrate apply` fills the older ones). This release writes the account
-- itself and upserts by the account-keyed unique keys of 20261204000006 to …08, which a row
-- without an account would not match. Dropped by the contract step, with the previous release.
CREATE FUNCTION kxp_endpoint_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.account_id IS NULL THEN
        NEW.account_id := (SELECT p.account_id FROM kxp_endpoints p WHERE p.id = NEW.endpoint_id);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER kxp_endpoint_secrets_account BEFORE INSERT ON kxp_endpoint_secrets
    FOR EACH ROW EXECUTE FUNCTION kxp_endpoint_account();
CREATE TRIGGER kxp_endpoint_stats_account BEFORE INSERT ON kxp_endpoint_stats
    FOR EACH ROW EXECUTE FUNCTION kxp_endpoint_account();
CREATE TRIGGER kxp_endpoint_stats_hourly_account BEFORE INSERT ON kxp_endpoint_stats_hourly
    FOR EACH ROW EXECUTE FUNCTION kxp_endpoint_account();
CREATE TRIGGER kxp_sequences_account BEFORE INSERT ON kxp_sequences
    FOR EACH ROW EXECUTE FUNCTION kxp_endpoint_account();
-- The tallies an upsert may still add to (this hour's and the last).
UPDATE kxp_endpoint_stats_hourly h SET account_id = p.account_id
    FROM kxp_endpoints p
    WHERE p.id = h.endpoint_id AND h.account_id IS NULL
    AND h.hour >= (extract(epoch FROM now()) * 1000)::bigint - 7200000;
