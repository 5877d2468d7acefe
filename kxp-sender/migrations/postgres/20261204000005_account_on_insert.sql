-- The account-keyed schema, expand step: during a rolling upgrade the previous release goes on
-- inserting rows of the small per-endpoint tables without their account. These triggers give
-- such a row its endpoint's account as it is inserted, so that once 20261204000006 has filled
-- the rows written before, every row of these tables has one (the older hourly tallies are
-- filled by `kxp migrate apply`). This release writes the account itself and upserts by the
-- account-keyed unique keys of 20261204000007 to …09, which a row without an account would not
-- match. Only the triggers here: creating one locks its table against writes for a moment, and
-- the filling (row locks only) is the next migration. Dropped by the contract step.
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
