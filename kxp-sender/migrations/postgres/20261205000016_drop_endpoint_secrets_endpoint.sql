-- no-transaction
-- The account-keyed schema, contract step: kxp_endpoint_secrets_endpoint's columns lead the table's primary key
-- now (…0012), which serves every statement it served.
DROP INDEX CONCURRENTLY IF EXISTS kxp_endpoint_secrets_endpoint;
