-- Which of its keys the receiver says verified each attempt: its `X-Kxp-Verified-Key` (the key's
-- fingerprint, 16 hex digits) on a 2xx, when it sent one. The console shows it beside the keys
-- that signed the attempt; a rotation can tell from it that the merchant has switched.
ALTER TABLE kxp_attempts ADD COLUMN verified_key TEXT;
