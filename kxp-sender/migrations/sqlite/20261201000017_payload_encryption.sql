-- Payload encryption: the merchant's public JWK (P-256 or X25519, normalized by kxp-jwe) that
-- each attempt encrypts the event's `data` to, as `data_jwe`; NULL: `data` in the clear. Read
-- at each attempt, so a new key applies to pending deliveries and retries too.
ALTER TABLE kxp_endpoints ADD COLUMN encryption_jwk TEXT;
