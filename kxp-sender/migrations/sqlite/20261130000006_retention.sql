-- Retention: the purge finds finished deliveries by age on their own small index instead of
-- scanning the table.
CREATE INDEX kxp_deliveries_finished ON kxp_deliveries (updated_at) WHERE status IN ('delivered', 'dead');
CREATE INDEX kxp_notifications_finished ON kxp_notifications (updated_at) WHERE status IN ('sent', 'failed');
