-- Endpoint credentials (issue 34): what an endpoint presents beside its signature. Two columns,
-- both NULL for an endpoint without any (every endpoint before this migration):
-- `credentials`, the custom headers' values and the `auth` credentials as one JSON document,
-- sealed under KXP_SECRETS_KEY (plaintext without a key, as signing secrets are), read only by
-- the attempt that sends them; `credentials_view`, what answers show of them (header names,
-- `auth`'s type and non-secret fields), never anything secret.
-- And the certificates watched: `server_certificate`, what a recent TLS handshake showed of the
-- endpoint's own certificate (JSON: issuer, not_after, seen_at); `certificate_notices`, the
-- expiry notices already queued (JSON array of `<client|server>:<not_after>:<days>`), so each
-- goes out once.
-- Nullable without a default: adding them changes the catalog only, no row is rewritten.
ALTER TABLE kxp_endpoints ADD COLUMN credentials TEXT;
ALTER TABLE kxp_endpoints ADD COLUMN credentials_view TEXT;
ALTER TABLE kxp_endpoints ADD COLUMN server_certificate TEXT;
ALTER TABLE kxp_endpoints ADD COLUMN certificate_notices TEXT;
