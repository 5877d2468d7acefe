-- Endpoint lifecycle: `status` is now `active`, `paused` or `deleted` (soft delete: the row
-- stays, so its deliveries keep their endpoint id and history). Two settings are stored and
-- shown now, and enforced by later releases: the pinned schema version (NULL: the event's own)
-- and a delivery rate limit (NULL: none).

ALTER TABLE kxp_endpoints ADD COLUMN api_version TEXT;
ALTER TABLE kxp_endpoints ADD COLUMN rate_limit_per_second BIGINT;
