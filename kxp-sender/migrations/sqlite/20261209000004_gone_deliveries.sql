-- Personal data's lifecycle (issue 37): deliveries that ended `erased` or `expired`, by when,
-- for retention to find those past the cut-off without reading the table (the
-- `kxp_deliveries_finished` index covers `delivered` and `dead` only).
CREATE INDEX kxp_deliveries_gone ON kxp_deliveries (updated_at)
    WHERE status IN ('erased', 'expired');
