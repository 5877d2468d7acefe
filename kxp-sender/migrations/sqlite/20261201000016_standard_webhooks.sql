-- Standard Webhooks: the headers and signed content of each endpoint's deliveries, `kxp`
-- (X-Kxp-Signature) or `standard-webhooks` (webhook-id, webhook-timestamp, webhook-signature).
-- Each row of kxp_endpoint_secrets says its own format in its text (a `whsec_` secret, an
-- `sw:` key), so during a change of format both formats sign until the overlap ends.
ALTER TABLE kxp_endpoints ADD COLUMN format TEXT NOT NULL DEFAULT 'kxp';
