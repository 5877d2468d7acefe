//! Retention: what finished data the sender removes, and when.
//!
//! Every hour (and when the workers start) [`Db::purge`] deletes, in small batches so no lock
//! is held for long:
//!
//! - deliveries finished before the cut-off — delivered, or dead *and replayed* — with their
//!   attempts. A dead delivery that was never replayed is the dead-letter queue: it stays until
//!   it is replayed, however old, so no event is ever dropped unseen;
//! - events older than the cut-off with no delivery left (their idempotency keys go with them:
//!   the idempotency window is the retention period);
//! - notifications sent or failed before the cut-off;
//! - hourly endpoint statistics older than [`STATS_KEPT`] (health reads 25 hours), and endpoint
//!   secrets whose rotation overlap has ended — whatever the retention.

use std::time::Duration;

use crate::db::{Db, ms, now_ms, on_db};
use crate::health::HOUR_MS;
use crate::store::StoreError;

/// How long hourly statistics are kept: health reads the last 25 hours.
pub const STATS_KEPT: Duration = Duration::from_secs(48 * 60 * 60);

/// Rows deleted per statement.
const BATCH: i64 = 500;

/// What one purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Finished deliveries.
    pub deliveries: u64,
    /// Their attempts.
    pub attempts: u64,
    /// Events with no delivery left.
    pub events: u64,
    /// Sent or failed notifications.
    pub notifications: u64,
    /// Hourly statistics rows.
    pub stats_rows: u64,
    /// Expired endpoint secrets.
    pub secrets: u64,
}

/// A finished delivery that may go: delivered, or dead and replayed.
const FINISHED: &str = "(status = 'delivered' OR (status = 'dead' AND replayed_by IS NOT NULL)) \
     AND updated_at < $1";

impl Db {
    /// Removes finished data older than `cutoff` (Unix ms), as the module docs describe.
    /// `None` keeps deliveries, events and notifications forever; statistics and expired
    /// secrets are removed either way.
    pub async fn purge(&self, cutoff: Option<i64>) -> Result<Purged, StoreError> {
        let now = now_ms();
        let mut purged = Purged::default();
        if let Some(cutoff) = cutoff {
            loop {
                let (attempts, deliveries) = self.purge_deliveries(cutoff).await?;
                purged.attempts += attempts;
                purged.deliveries += deliveries;
                if deliveries < BATCH as u64 {
                    break;
                }
            }
            purged.events = self
                .delete_batches(
                    "DELETE FROM kxp_events WHERE id IN (SELECT id FROM kxp_events e WHERE e.created_at < $1 \
                     AND NOT EXISTS (SELECT 1 FROM kxp_deliveries d WHERE d.event_id = e.id) LIMIT $2)",
                    cutoff,
                )
                .await?;
            purged.notifications = self
                .delete_batches(
                    "DELETE FROM kxp_notifications WHERE id IN (SELECT id FROM kxp_notifications \
                     WHERE status IN ('sent', 'failed') AND updated_at < $1 LIMIT $2)",
                    cutoff,
                )
                .await?;
        }
        let stats_cutoff = (now - ms(STATS_KEPT)).div_euclid(HOUR_MS) * HOUR_MS;
        purged.stats_rows = self
            .delete_batches(
                "DELETE FROM kxp_endpoint_stats_hourly WHERE (endpoint_id, hour) IN \
                 (SELECT endpoint_id, hour FROM kxp_endpoint_stats_hourly WHERE hour < $1 LIMIT $2)",
                stats_cutoff,
            )
            .await?;
        purged.secrets = self
            .delete_batches(
                "DELETE FROM kxp_endpoint_secrets WHERE id IN (SELECT id FROM kxp_endpoint_secrets \
                 WHERE expires_at IS NOT NULL AND expires_at <= $1 LIMIT $2)",
                now,
            )
            .await?;
        Ok(purged)
    }

    /// One batch of finished deliveries and their attempts, in one transaction: the attempts
    /// of the oldest [`BATCH`] first, then those deliveries (the `NOT EXISTS` keeps the foreign
    /// key satisfied whatever happened in between).
    async fn purge_deliveries(&self, cutoff: i64) -> Result<(u64, u64), StoreError> {
        let attempts = format!(
            "DELETE FROM kxp_attempts WHERE delivery_id IN \
             (SELECT id FROM kxp_deliveries WHERE {FINISHED} ORDER BY updated_at, id LIMIT $2)"
        );
        let deliveries = format!(
            "DELETE FROM kxp_deliveries WHERE id IN (SELECT id FROM kxp_deliveries WHERE {FINISHED} \
             AND NOT EXISTS (SELECT 1 FROM kxp_attempts a WHERE a.delivery_id = kxp_deliveries.id) \
             ORDER BY updated_at, id LIMIT $2)"
        );
        Ok(on_db!(self, |pool, begin| {
            let mut tx = pool.begin_with(begin).await?;
            let attempts = sqlx::query(&attempts)
                .bind(cutoff)
                .bind(BATCH)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let deliveries = sqlx::query(&deliveries)
                .bind(cutoff)
                .bind(BATCH)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            (attempts, deliveries)
        }))
    }

    /// Runs a `DELETE … LIMIT $2` with `$1` bound until it deletes less than a batch.
    async fn delete_batches(&self, sql: &str, bound: i64) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let deleted = on_db!(self, |pool, _begin| {
                sqlx::query(sql)
                    .bind(bound)
                    .bind(BATCH)
                    .execute(pool)
                    .await?
                    .rows_affected()
            });
            total += deleted;
            if deleted < BATCH as u64 {
                return Ok(total);
            }
        }
    }
}

/// How often [`run`] purges.
pub const PURGE_EVERY: Duration = Duration::from_secs(60 * 60);

/// Purges at once, then every [`PURGE_EVERY`], until `shutdown` turns true. `retention`: how
/// long finished data is kept (`None`: forever).
pub async fn run(
    db: Db,
    retention: Option<Duration>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    while !*shutdown.borrow() {
        let cutoff = retention.map(|keep| now_ms().saturating_sub(ms(keep)));
        match db.purge(cutoff).await {
            Ok(purged) if purged != Purged::default() => tracing::info!(
                target: "kxp_sender", deliveries = purged.deliveries, attempts = purged.attempts,
                events = purged.events, notifications = purged.notifications,
                stats_rows = purged.stats_rows, secrets = purged.secrets, "purged data past retention"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(target: "kxp_sender", error = %e, "purging old data failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(PURGE_EVERY) => {}
            _ = shutdown.changed() => {}
        }
    }
}
