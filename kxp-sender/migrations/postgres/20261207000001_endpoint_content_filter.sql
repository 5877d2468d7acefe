-- Content filters (issue 35): `content_filter`, the endpoint's filter as compact JSON
-- (kxp-filter's language, checked when written), read with the endpoint's types at every
-- ingestion; NULL for an endpoint that takes every event of its types (every endpoint before
-- this migration). Not `filter`: that is a keyword in both databases' grammars.
-- Nullable without a default: adding it changes the catalog only, no row is rewritten.
ALTER TABLE kxp_endpoints ADD COLUMN content_filter TEXT;
