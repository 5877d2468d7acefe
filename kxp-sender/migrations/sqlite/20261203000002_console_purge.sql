-- The console's links and sessions no longer stay forever. Retention purges expired portal links
-- and expired sessions (with the one-time message a session may hold: a new endpoint's secret,
-- sealed) whatever the retention period, and creating a link counts the account's unused links
-- that have not expired (at most 1,000). These indexes keep both from reading the whole table;
-- the first also serves deleting an account (its links go with it).
CREATE INDEX kxp_portal_links_account ON kxp_portal_links (account_id, expires_at);
CREATE INDEX kxp_portal_links_expiry ON kxp_portal_links (expires_at);
-- A session is over 8 hours after it was last seen or 24 hours after it was opened.
CREATE INDEX kxp_sessions_last_seen ON kxp_sessions (last_seen_at);
CREATE INDEX kxp_sessions_created ON kxp_sessions (created_at);
