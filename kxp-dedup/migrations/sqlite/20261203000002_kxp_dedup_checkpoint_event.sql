-- The id of the event at each checkpoint's number: a catch-up that finds another event at that
-- number in the sender's feed (or the number past the feed's end) knows the sender was reset.
ALTER TABLE kxp_checkpoints ADD COLUMN event_id TEXT;
