-- Traces (issue 32). An event keeps the producer's W3C trace context, as `POST /v1/events` (or
-- the broker message, or the outbox row) carried it: `traceparent` names the producer's span,
-- which the event's spans and every delivery attempt's are children of; `tracestate` is the
-- producer's vendor data, stored for the sender's own spans and never forwarded to a merchant.
-- Both NULL for an event without a (valid) context, and for every event before this migration.
-- Nullable without a default: adding them changes the catalog only, no row is rewritten.
ALTER TABLE kxp_events ADD COLUMN traceparent TEXT;
ALTER TABLE kxp_events ADD COLUMN tracestate TEXT;
-- Whether each attempt carries a `traceparent` naming its span (`trace_propagation`, default
-- true): false for a merchant who must not see it. A constant default is catalog-only too.
ALTER TABLE kxp_endpoints ADD COLUMN trace_propagation BOOLEAN NOT NULL DEFAULT TRUE;
