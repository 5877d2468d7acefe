//! Each endpoint's sequence: 1, 2, 3, … with no holes, one number per (endpoint, event), kept
//! by retries and replays, sent as the `X-Kxp-Sequence` hint beside `X-Kxp-Endpoint-Id`, with
//! the signature unchanged. On PostgreSQL, two servers ingesting into one database at once.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kxp_api::{Delivery, DeliveryQuery};
use serde_json::json;

use crate::support::{Api, Backend, Database, Receiver, Reply, run, sender, typed, verifies};

/// Every delivery of `endpoint_id`, once each has its number and is `status` (within 20 s).
pub(crate) async fn numbered(
    api: &Api,
    endpoint_id: &str,
    count: usize,
    status: &str,
) -> Vec<Delivery> {
    let query: DeliveryQuery = typed(json!({"endpoint_id": endpoint_id, "limit": 500}));
    let start = Instant::now();
    loop {
        let all = api.client.all_deliveries(&query).await.unwrap();
        if all.len() >= count
            && all
                .iter()
                .all(|d| d.sequence.is_some() && d.status.as_str() == status)
        {
            return all;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{endpoint_id}: {} of {count} deliveries numbered and {status}",
            all.iter()
                .filter(|d| d.sequence.is_some() && d.status.as_str() == status)
                .count()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The numbers of `deliveries` by event, checked to be exactly 1..=n, one per event.
pub(crate) fn gapless(deliveries: &[Delivery]) -> HashMap<String, u64> {
    let mut by_event: HashMap<String, u64> = HashMap::new();
    for d in deliveries {
        let n = d.sequence.unwrap();
        if let Some(before) = by_event.insert(d.event_id.to_string(), n) {
            assert_eq!(before, n, "a replay keeps its original's number: {d:?}");
        }
    }
    let mut numbers: Vec<u64> = by_event.values().copied().collect();
    numbers.sort_unstable();
    let expected: Vec<u64> = (1..=by_event.len() as u64).collect();
    assert_eq!(numbers, expected, "one number per event, with no holes");
    by_event
}

each_backend!(deliveries_are_numbered_in_order_and_carry_the_number_as_a_hint);
on_citus!(
    deliveries_are_numbered_in_order_and_carry_the_number_as_a_hint,
    two_servers_number_without_holes_or_twins
);

async fn deliveries_are_numbered_in_order_and_carry_the_number_as_a_hint(db: Database) {
    let s = db.sender("0s,20ms").await;
    let receiver = Receiver::start(vec![Reply::Status(500)]).await;
    let (endpoint_id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let mut emitted = Vec::new();
    for i in 0..12 {
        emitted.push(s.api.emit("payment.succeeded", json!({"n": i})).await);
    }
    let deliveries = numbered(&s.api, &endpoint_id, 12, "delivered").await;
    let numbers = gapless(&deliveries);
    // Emitted one after another, so committed in that order: numbered in that order.
    let in_order: Vec<u64> = emitted.iter().map(|id| numbers[id]).collect();
    assert_eq!(in_order, (1..=12).collect::<Vec<u64>>());

    // Every request carries the hints, and the first one's retry (after a 500) the same number;
    // the signature is the one it always was.
    let seen = receiver.seen();
    assert_eq!(seen.len(), 13);
    for request in &seen {
        assert_eq!(request.header("x-kxp-endpoint-id"), endpoint_id);
        let hint: u64 = request
            .header("x-kxp-sequence")
            .parse()
            .unwrap_or_else(|_| panic!("{request:?}"));
        assert_eq!(hint, numbers[&request.event_id()], "{request:?}");
        assert!(verifies(request, &secret));
    }

    // A replay is the same (endpoint, event): it keeps the number.
    let first = deliveries.iter().find(|d| d.sequence == Some(1)).unwrap();
    let replay = s.api.client.replay_delivery(&first.id).await.unwrap();
    assert_eq!(replay.sequence, Some(1));
    s.api
        .wait_for(
            first.event_id.as_str(),
            "delivered",
            Duration::from_secs(10),
        )
        .await;
    let last = receiver.seen().pop().unwrap();
    assert_eq!(last.event_id(), first.event_id.as_str());
    assert_eq!(last.header("x-kxp-sequence"), "1");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_paused_endpoints_held_deliveries_are_numbered_too() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (paused, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let (active, _) = s.api.endpoint(&receiver.url, json!({})).await;
    s.api
        .client
        .pause_endpoint(&paused.as_str().into())
        .await
        .unwrap();
    for i in 0..5 {
        s.api.emit("payment.succeeded", json!({"n": i})).await;
    }
    gapless(&numbered(&s.api, &paused, 5, "pending").await);
    gapless(&numbered(&s.api, &active, 5, "delivered").await);
    s.server.shutdown().await;
}

#[tokio::test]
async fn two_servers_ingesting_into_one_postgresql_number_without_holes_or_twins() {
    run(
        Backend::Postgres,
        "two_servers_sequence",
        two_servers_number_without_holes_or_twins,
    )
    .await;
}

/// Two servers on one PostgreSQL database (or Citus cluster), ingesting at once.
async fn two_servers_number_without_holes_or_twins(db: Database) {
    // Eleven tries: the ten scripted 500s below can never make a delivery go dead (three tries
    // let one delivery meet three of them and never reach `delivered`: CI saw it).
    const SCHEDULE: &str = "0s,10ms,10ms,10ms,10ms,10ms,10ms,10ms,10ms,10ms,10ms";
    let first = db.sender(SCHEDULE).await;
    let second = db.sender(SCHEDULE).await;
    // One endpoint fails now and then (retries keep their number), one always answers.
    let flaky = Receiver::start(vec![Reply::Status(500); 10]).await;
    let steady = Receiver::start(vec![]).await;
    let (a, _) = first.api.endpoint(&flaky.url, json!({})).await;
    let (b, _) = first.api.endpoint(&steady.url, json!({})).await;

    // 8 concurrent producers, half through each server: 160 events.
    let mut producers = tokio::task::JoinSet::new();
    for p in 0..8 {
        let api = if p % 2 == 0 {
            first.api.clone()
        } else {
            second.api.clone()
        };
        producers.spawn(async move {
            for i in 0..20 {
                api.emit("payment.succeeded", json!({"p": p, "i": i})).await;
            }
        });
    }
    while let Some(done) = producers.join_next().await {
        done.unwrap();
    }
    for endpoint in [&a, &b] {
        let numbers = gapless(&numbered(&first.api, endpoint, 160, "delivered").await);
        assert_eq!(numbers.len(), 160);
    }
    // What each receiver was told matches the stored numbers.
    for (receiver, endpoint) in [(&flaky, &a), (&steady, &b)] {
        let stored = gapless(&numbered(&first.api, endpoint, 160, "delivered").await);
        let mut hinted: BTreeMap<String, String> = BTreeMap::new();
        for seen in receiver.seen() {
            hinted.insert(seen.event_id(), seen.header("x-kxp-sequence"));
        }
        for (event, n) in stored {
            // An attempt made before its number existed carries none; every other one agrees.
            let hint = &hinted[&event];
            assert!(
                hint.is_empty() || *hint == n.to_string(),
                "{event}: {hint} vs {n}"
            );
        }
    }
    first.server.shutdown().await;
    second.server.shutdown().await;
}
