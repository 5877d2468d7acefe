//! Retention: what finished data the sender removes, and when.
//!
//! Every hour (and when the workers start) [`Db::purge`] deletes, in small batches so no lock
//! is held for long:
//!
//! - the payloads of events whose own retention (`retention_days`) passed, wherever they are
//!   stored ([`store::erasures`](crate::store)): the event keeps its id, type and times, and a
//!   delivery not made by then ends `expired`;
//! - deliveries finished before the cut-off — delivered, erased, expired, or dead *and
//!   replayed* — with their attempts;
//! - dead deliveries never replayed, the dead-letter queue, once they have been dead for the
//!   dead-letter retention (30 days by default; `None` keeps them until replayed). The account
//!   is told first (`endpoint.dead_letters_expiring`, once per delivery), and none goes before
//!   a day after that notice: a sender that was down past the date still gives a day's warning;
//! - events older than the cut-off with no delivery left (their idempotency keys go with them:
//!   the idempotency window is the retention period);
//! - notifications sent or failed before the cut-off;
//! - hourly endpoint statistics older than [`STATS_KEPT`] (health reads 25 hours), endpoint
//!   secrets whose rotation overlap has ended, the console's portal links past their expiry
//!   (used or not), and console sessions past their idle or absolute expiry, with the one-time
//!   message a session may still hold (a new endpoint's secret, sealed) — whatever the
//!   retention. A session is deleted when a request finds it expired, but one nobody comes
//!   back to would otherwise stay.

use std::time::Duration;

use crate::model::{ms, now_ms};
use crate::store::{Db, Purged, Retention, StoreError};

/// How often [`run`] purges.
pub(crate) const PURGE_EVERY: Duration = Duration::from_secs(60 * 60);

/// Purges at once, then every [`PURGE_EVERY`], until `shutdown` turns true. `retention`: how
/// long finished data is kept (`None`: forever); `dead_letters`: how long dead deliveries are
/// (`None`: until replayed).
pub(crate) async fn run(
    db: Db,
    retention: Option<Duration>,
    dead_letters: Option<Duration>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    while !*shutdown.borrow() {
        let now = now_ms();
        let rules = Retention {
            cutoff: retention.map(|keep| now.saturating_sub(ms(keep))),
            dead_letters,
            now,
        };
        match db.purge(rules).await {
            Ok(purged) if purged != Purged::default() => tracing::info!(
                target: "kxp_sender", expired_payloads = purged.expired_payloads,
                dead_letters = purged.dead_letters, dead_letter_notices = purged.dead_letter_notices,
                deliveries = purged.deliveries, attempts = purged.attempts,
                events = purged.events, notifications = purged.notifications,
                stats_rows = purged.stats_rows, secrets = purged.secrets,
                portal_links = purged.portal_links, sessions = purged.sessions,
                "purged data past retention"
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

/// Watches pull endpoints' readers, at once and then every quarter of `idle` (at most every
/// minute), until `shutdown` turns true: deletes the temporary pull endpoints (`kxp listen`'s)
/// that no one has read for `idle` (once this process has been up that long) — as the API
/// deletes one: their secrets are erased, their unread deliveries discarded — and notifies the
/// platform of the readers that left an event unread for `stall` without committing.
pub(crate) async fn watch_pull_readers(
    db: Db,
    idle: Duration,
    stall: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let every = (idle.min(stall) / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let started = crate::model::tokio_instant();
    while !*shutdown.borrow() {
        match db
            .notice_stalled_readers(now_ms().saturating_sub(ms(stall)))
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::warn!(
                target: "kxp_sender", endpoints = n,
                "pull endpoints' readers left events unread: the platform is notified"
            ),
            Err(e) => tracing::error!(
                target: "kxp_sender", error = %e, "looking for stalled pull readers failed"
            ),
        }
        // Not before this process has been up for `idle`: after the sender was down, every
        // session gets that long to come back.
        let abandoned = if crate::model::tokio_instant() < started + idle {
            Ok(Vec::new())
        } else {
            db.abandoned_temporary(now_ms().saturating_sub(ms(idle)))
                .await
        };
        match abandoned {
            Ok(abandoned) => {
                for key in abandoned {
                    match db.delete_endpoint(&key.account_id, &key.id).await {
                        Ok(dead) => tracing::info!(
                            target: "kxp_sender", account_id = %key.account_id, endpoint_id = %key.id,
                            dead_deliveries = dead, "removed a temporary endpoint no one read"
                        ),
                        // Deleted meanwhile (its `kxp listen` ended, another process).
                        Err(StoreError::NotFound) => {}
                        Err(e) => tracing::error!(
                            target: "kxp_sender", endpoint_id = %key.id, error = %e,
                            "removing an abandoned temporary endpoint failed"
                        ),
                    }
                }
            }
            Err(e) => tracing::error!(
                target: "kxp_sender", error = %e, "looking for abandoned temporary endpoints failed"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => {}
        }
    }
}
