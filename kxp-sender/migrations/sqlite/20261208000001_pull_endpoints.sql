-- Pull endpoints (issue 36). `mode`: `push` (every endpoint before this migration, and the
-- default) or `pull`: an endpoint whose receiver reads its feed instead of being sent
-- deliveries; its `url` is '' (it has none), and its deliveries are stored as `unread`, never
-- attempted, until its reader commits past them. `temporary`: made by `kxp listen`, and
-- deleted by the server after it has had no reader for a while.
-- `pull_cursor`: the number the reader committed (0: none yet); `pull_cursor_at` when it last
-- did, and `pull_read_at` when the feed was last read (Unix ms; NULL: never), for the lag
-- health shows, the notice of a reader that stopped and the removal of an abandoned temporary
-- endpoint. `pull_stall_notice_at`: when the platform was told the reader stopped (NULL again
-- at its next commit), so a stall is announced once.
-- Constant defaults and nullable columns: catalog changes only, no row is rewritten.
ALTER TABLE kxp_endpoints ADD COLUMN mode TEXT NOT NULL DEFAULT 'push';
ALTER TABLE kxp_endpoints ADD COLUMN temporary BOOLEAN NOT NULL DEFAULT 0;
ALTER TABLE kxp_endpoints ADD COLUMN pull_cursor BIGINT NOT NULL DEFAULT 0;
ALTER TABLE kxp_endpoints ADD COLUMN pull_cursor_at BIGINT;
ALTER TABLE kxp_endpoints ADD COLUMN pull_read_at BIGINT;
ALTER TABLE kxp_endpoints ADD COLUMN pull_stall_notice_at BIGINT;
