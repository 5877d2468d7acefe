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
//!
//! Each endpoint is announced with its account (`account endpoint`), so that what the listener
//! claims for is found by its key. Releases before the account-keyed schema announced endpoint
//! ids alone, on [`EARLIER_CHANNEL`]: during a rolling upgrade this release listens there too,
//! and scans at once for what they announce.

use std::sync::Arc;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;

use crate::engine::config::Shared;
use crate::model::{AccountId, EndpointId, EndpointKey};

/// The channel.
pub(crate) const CHANNEL: &str = "kxp_work_by_account";

/// The channel of the releases before the account-keyed schema (endpoint ids alone).
const EARLIER_CHANNEL: &str = "kxp_work";

/// The most bytes of endpoint keys one notification carries (PostgreSQL's limit is 8000).
const MAX_PAYLOAD: usize = 7000;

/// The payloads that announce `endpoints`: comma-separated `account endpoint` pairs, each
/// payload under [`MAX_PAYLOAD`]. Ids are ours (a prefix and a UUID): no comma, no space.
fn payloads(endpoints: &[EndpointKey]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for key in endpoints {
        let entry = format!("{} {}", key.account_id, key.id);
        if !current.is_empty() && current.len() + 1 + entry.len() > MAX_PAYLOAD {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(',');
        }
        current.push_str(&entry);
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
    if let Err(e) = listener.listen_all([CHANNEL, EARLIER_CHANNEL]).await {
        tracing::warn!(target: "kxp_sender", error = %e, "cannot listen for announced work; relying on the scan");
        return;
    }
    loop {
        let received = tokio::select! {
            received = listener.try_recv() => received,
            _ = stop.changed() => return,
        };
        match received {
            Ok(Some(notification)) if notification.channel() == CHANNEL => {
                shared.wake_for(keys(notification.payload()));
            }
            // An earlier release's announcement names no account: everything due is scanned.
            Ok(Some(_)) => shared.wake_workers(),
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

/// The endpoint keys a payload of [`payloads`] names; an entry that is not a pair is skipped
/// (the scan finds its work).
fn keys(payload: &str) -> impl Iterator<Item = EndpointKey> + '_ {
    payload.split(',').filter_map(|entry| {
        let (account, id) = entry.split_once(' ')?;
        (!account.is_empty() && !id.is_empty()).then(|| EndpointKey {
            account_id: AccountId::from(account),
            id: EndpointId::from(id),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_stay_under_the_limit_and_lose_no_key() {
        let keys: Vec<EndpointKey> = (0..1000)
            .map(|n| EndpointKey {
                account_id: AccountId::from(format!("acc_{:032}", n % 7)),
                id: EndpointId::from(format!("ep_{n:032}")),
            })
            .collect();
        let payloads = payloads(&keys);
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let back: Vec<EndpointKey> = payloads.iter().flat_map(|p| super::keys(p)).collect();
        assert_eq!(back, keys);
        assert!(super::payloads(&[]).is_empty());
    }

    #[test]
    fn entries_that_are_not_pairs_are_skipped() {
        let back: Vec<EndpointKey> = keys("ep_alone,acc_1 ep_1,, ep_2,acc_3 ").collect();
        assert_eq!(
            back,
            [EndpointKey {
                account_id: AccountId::from("acc_1"),
                id: EndpointId::from("ep_1"),
            }]
        );
    }
}
