-- Claiming per endpoint: an endpoint's due deliveries in due order, on their own small slice of
-- the table. A worker that knows which endpoints have work and room for it (new events, a
-- finished attempt) claims from each with a range scan here that stops at the endpoint's free
-- capacity, so the claim's cost does not grow with any endpoint's backlog, and an endpoint
-- already at its limit is not scanned at all.
CREATE INDEX kxp_deliveries_endpoint_due ON kxp_deliveries (endpoint_id, next_attempt_at)
    WHERE status = 'pending';
