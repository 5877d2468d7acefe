-- The attempts whose account is not filled in yet, as on PostgreSQL (where the previous release
-- may write some during a rolling upgrade). On SQLite 20261204000001 filled every row: this
-- index stays empty, and `kxp serve` finds nothing to fill at each start.
CREATE INDEX kxp_attempts_without_account ON kxp_attempts (id) WHERE account_id IS NULL;
