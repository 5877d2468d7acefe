//! Telling other `kxp serve` processes about new work, on PostgreSQL: `LISTEN`/`NOTIFY` on one
//! channel.
//!
//! A process whose API ingests an event wakes its own delivery loop in memory
//! ([`Shared::wake_for`]). A process that runs no workers (an API-only process behind the load
//! balancer) has no loop to wake: it announces the endpoints it queued for instead, coalesced —
//! whatever queued up while the last `NOTIFY` was on its way goes in the next one — and every
//! process that runs workers listens and claims for them at once. Without the announcement an
//! event would wait for a worker's next scan of everything due (every 250 ms by default).
//!
//! A `NOTIFY` is sent after the ingestion committed, so a listener never looks before the rows
//! are there. Notifications are not durable: one lost while a listener reconnects is covered by
//! the scan, which is why the scan stays.

use std::sync::Arc;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;

use crate::engine::config::Shared;
use crate::model::EndpointId;

/// The channel.
pub(crate) const CHANNEL: &str = "kxp_work";

/// The most bytes of endpoint ids one notification carries (PostgreSQL's limit is 8000).
const MAX_PAYLOAD: usize = 7000;

/// The payloads that announce `endpoints`: comma-separated ids, each under [`MAX_PAYLOAD`].
fn payloads(endpoints: &[EndpointId]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for id in endpoints {
        if !current.is_empty() && current.len() + 1 + id.as_str().len() > MAX_PAYLOAD {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(',');
        }
        current.push_str(id.as_str());
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

/// Sends what is announced until `stop`: one `NOTIFY` per flush.
pub(crate) async fn send(pool: PgPool, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        tokio::select! {
            _ = shared.announcements.poked() => {}
            _ = stop.changed() => {}
        }
        for payload in payloads(&shared.announcements.take()) {
            let sent = crate::store::notify(&pool, CHANNEL, &payload).await;
            if let Err(e) = sent {
                // The workers' scan finds the work all the same, a little later.
                tracing::warn!(target: "kxp_sender", error = %e, "announcing new work failed");
            }
        }
    }
}

/// Listens for announcements until `stop`, and wakes this process's delivery loop for the
/// endpoints they name. After the connection was lost (and re-made), the loop scans everything
/// due: what was announced meanwhile is not lost.
pub(crate) async fn listen(pool: PgPool, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut listener = match PgListener::connect_with(&pool).await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::warn!(target: "kxp_sender", error = %e, "cannot listen for announced work; relying on the scan");
            return;
        }
    };
    if let Err(e) = listener.listen(CHANNEL).await {
        tracing::warn!(target: "kxp_sender", error = %e, "cannot listen for announced work; relying on the scan");
        return;
    }
    loop {
        let received = tokio::select! {
            received = listener.try_recv() => received,
            _ = stop.changed() => return,
        };
        match received {
            Ok(Some(notification)) => shared.wake_for(
                notification
                    .payload()
                    .split(',')
                    .filter(|id| !id.is_empty())
                    .map(EndpointId::from),
            ),
            // The connection was lost and is re-made by the next call.
            Ok(None) => shared.wake_workers(),
            Err(e) => {
                tracing::warn!(target: "kxp_sender", error = %e, "listening for announced work failed; retrying");
                shared.wake_workers();
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_stay_under_the_limit_and_lose_no_id() {
        let ids: Vec<EndpointId> = (0..1000)
            .map(|n| EndpointId::from(format!("ep_{n:032}")))
            .collect();
        let payloads = payloads(&ids);
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let back: Vec<&str> = payloads.iter().flat_map(|p| p.split(',')).collect();
        assert_eq!(back.len(), 1000);
        assert_eq!(back[999], ids[999].as_str());
        assert!(super::payloads(&[]).is_empty());
    }
}
