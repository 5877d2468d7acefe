-- Backpressure: an account's due backlog (pending, due now; held deliveries sit at HELD, far
-- past now) is counted at ingestion, up to the bound, on this index: a range scan of the
-- account's pending deliveries in due order that stops at the bound, so the count costs at
-- most `backlog_limit` index entries however large the backlog, and held deliveries are
-- never read.
CREATE INDEX kxp_deliveries_account_due ON kxp_deliveries (account_id, next_attempt_at)
    WHERE status = 'pending';
