-- Ed25519 signatures (`v1a`): what each endpoint signs with, `hmac` (a shared secret, `v1`),
-- `ed25519` (a private key kept here, `v1a`) or `both` (during a receiver's migration).
ALTER TABLE kxp_endpoints ADD COLUMN signing TEXT NOT NULL DEFAULT 'hmac';
-- What each row of kxp_endpoint_secrets holds: an HMAC secret, or an Ed25519 private key (its
-- 32-byte seed, in base64), sealed like the secrets when the server has a key ring.
ALTER TABLE kxp_endpoint_secrets ADD COLUMN kind TEXT NOT NULL DEFAULT 'hmac';
