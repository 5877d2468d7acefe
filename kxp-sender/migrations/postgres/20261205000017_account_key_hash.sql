-- The account-keyed schema, contract step: an API key's hash lives in kxp_api_keys (its key
-- there keeps keys unique). The copy on the account row is no longer unique, which a table
-- distributed by account could not enforce (a unique key must include the account), nor
-- required: this release leaves it empty; the release before reads it only after
-- kxp_api_keys, and still writes it. A later release drops the column.
-- Both changes only relax what the release before relies on:
-- squawk-ignore-file ban-drop-constraint
-- squawk-ignore-file ban-drop-not-null
ALTER TABLE kxp_accounts DROP CONSTRAINT kxp_accounts_api_key_hash_key;
ALTER TABLE kxp_accounts ALTER COLUMN api_key_hash DROP NOT NULL;
