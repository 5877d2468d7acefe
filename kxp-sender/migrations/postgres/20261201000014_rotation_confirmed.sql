-- Rotation the receiver confirms. When a receiver last verified a delivery with each secret (by
-- its `X-Kxp-Verified-Key`), to the minute: `GET /v1/endpoints/{id}` and the console show it.
ALTER TABLE kxp_endpoint_secrets ADD COLUMN last_verified_at BIGINT;
-- A rotation started with "expire_old": "when_confirmed": the secret it made, how many
-- consecutive 2xx verified with that secret end the older ones, and how many there have been.
-- NULL: no such rotation under way.
ALTER TABLE kxp_endpoints ADD COLUMN confirm_secret_id BIGINT;
ALTER TABLE kxp_endpoints ADD COLUMN confirm_needed BIGINT;
ALTER TABLE kxp_endpoints ADD COLUMN confirmations BIGINT NOT NULL DEFAULT 0;
