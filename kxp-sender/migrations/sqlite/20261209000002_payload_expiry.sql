-- Personal data's lifecycle (issue 37): the events whose payload is still held and has an
-- expiry, in expiry order, for retention to find those past it without reading the table.
CREATE INDEX kxp_events_payload_expiry ON kxp_events (payload_expires_at)
    WHERE payload_expires_at IS NOT NULL AND payload_gone IS NULL;
