-- The producer's ordering key of an event (`NewEvent::ordering_key`, such as a payment id):
-- served in the catch-up feed, where an ordered receiver reads which events stay in order with
-- which. NULL: the event has none.
ALTER TABLE kxp_events ADD COLUMN ordering_key TEXT;
