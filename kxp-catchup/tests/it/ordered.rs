//! Ordered mode, end to end: deliveries are held and answered 200, and the handler gets each
//! key's events in sequence order from the feed; a key whose first event the handler refuses
//! holds back only its own events; dead deliveries and a restored backup end processed exactly
//! once, still in order per key.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::middleware::from_fn_with_state;
use axum::routing::post;
use kxp_axum::catch_up::{CatchUp, CatchUpConfig, CatchUpExt, Credential};
use kxp_axum::dedup::{self, Handled, Outcome, Store};
use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
use kxp_dedup::sqlx;
use serde_json::json;

use crate::{SECS_20, copy_db, point, register, sender, serve, switch, wait_status};

/// The key of event `n`: A, B and C in turn, and every fourth event without one.
pub(crate) fn key(n: u32) -> Option<&'static str> {
    ["", "pay_A", "pay_B", "pay_C"][(n % 4) as usize]
        .get(..)
        .filter(|k| !k.is_empty())
}

#[derive(Clone)]
pub(crate) struct Shop {
    pub(crate) store: Store,
    /// While set, the handler refuses event 1 (key A's first): A's later events must wait.
    pub(crate) a_stuck: Arc<AtomicBool>,
}

async fn webhook(State(shop): State<Shop>, event: VerifiedEvent) -> Handled {
    let n = event.data()["n"].as_i64().unwrap();
    if n == 1 && shop.a_stuck.load(Ordering::SeqCst) {
        return Handled(Outcome::Failed);
    }
    let id = event.id().to_owned();
    dedup::process_in_transaction(&shop.store, &event, |mut tx| async move {
        sqlx::query("INSERT INTO handled (event_id, n) VALUES (?1, ?2)")
            .bind(&id)
            .bind(n)
            .execute(tx.sqlite().unwrap())
            .await?;
        Ok::<_, sqlx::Error>(tx)
    })
    .await
}

pub(crate) struct App {
    pub(crate) url: String,
    pub(crate) shop: Shop,
    pub(crate) catch_up: CatchUp,
    /// Outside everything: while set, deliveries get 503 before ordered mode sees them.
    down: Arc<AtomicBool>,
    server: tokio::task::JoinHandle<()>,
}

pub(crate) async fn start(db: &Path, secret: &str, config: CatchUpConfig, a_stuck: bool) -> App {
    let store = Store::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS handled \
         (turn INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL, n INTEGER NOT NULL)",
    )
    .execute(store.sqlite_pool().unwrap())
    .await
    .unwrap();
    let receiver = || Receiver::new(kxp_verify::Verifier::from_secret_list(secret).unwrap());
    let catch_up = CatchUp::new(config.ordered(receiver()), store.clone()).unwrap();
    let down = Arc::new(AtomicBool::new(false));
    let shop = Shop {
        store,
        a_stuck: Arc::new(AtomicBool::new(a_stuck)),
    };
    let route: axum::routing::MethodRouter<Shop> = post(webhook)
        .layer(VerifyLayer::new(receiver()))
        .layer(catch_up.layer())
        .layer(from_fn_with_state(down.clone(), switch));
    let (url, server) = serve(Router::new().route("/hook", route).with_state(shop.clone())).await;
    App {
        url,
        shop,
        catch_up,
        down,
        server,
    }
}

impl App {
    pub(crate) async fn stop(self) {
        self.catch_up.stop();
        self.server.abort();
        let _ = self.server.await;
        self.shop.store.close().await;
    }

    /// The numbers handled, in the order the handler got them.
    pub(crate) async fn handled(&self) -> Vec<u32> {
        sqlx::query_scalar("SELECT n FROM handled ORDER BY turn")
            .fetch_all(self.shop.store.sqlite_pool().unwrap())
            .await
            .unwrap()
    }

    /// Waits until exactly the numbers `expected` are handled (in any order), once each.
    pub(crate) async fn wait_handled(&self, expected: impl IntoIterator<Item = u32>) {
        let mut expected: Vec<u32> = expected.into_iter().collect();
        expected.sort_unstable();
        let start = Instant::now();
        loop {
            let mut handled = self.handled().await;
            handled.sort_unstable();
            let mut distinct = handled.clone();
            distinct.dedup();
            assert_eq!(handled, distinct, "an event was processed twice");
            if handled == expected {
                return;
            }
            assert!(
                start.elapsed() < SECS_20,
                "handled {handled:?}, waiting for {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

pub(crate) async fn emit(client: &kxp_api::Client, n: u32) -> String {
    let mut event = kxp_api::NewEvent::new("payment.updated", &json!({"n": n})).unwrap();
    if let Some(key) = key(n) {
        event = event.ordering_key(key);
    }
    let event = client.create_event(&event, None).await.unwrap();
    event.id.into_string()
}

/// Each key's events were handled in the order they were emitted (their sequence order).
pub(crate) fn assert_in_order_per_key(handled: &[u32]) {
    for k in ["pay_A", "pay_B", "pay_C"] {
        let of_key: Vec<u32> = handled
            .iter()
            .copied()
            .filter(|&n| key(n) == Some(k))
            .collect();
        let mut sorted = of_key.clone();
        sorted.sort_unstable();
        assert_eq!(of_key, sorted, "{k} out of order in {handled:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_mode_hands_each_key_its_events_in_sequence_order_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (sender_server, client) = sender(dir.path()).await;
    let base = format!("http://{}", sender_server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let db = dir.path().join("receiver.db");
    let config = || {
        CatchUpConfig::new(
            &base,
            Credential::Secret(kxp_verify::Secret::new(&secret).unwrap()),
        )
        .with_delay(Duration::from_millis(200))
        .with_interval(Duration::from_millis(500))
        .with_page_size(3)
    };
    let app = start(&db, &secret, config(), true).await;
    point(&client, &endpoint, &app.url).await;

    // 1–12, with A's first refused: every delivery is answered 200 (held), and every event
    // but A's is handled; A's wait behind its first.
    let mut events = Vec::new();
    for n in 1..=12 {
        events.push(emit(&client, n).await);
    }
    let others = (1..=12).filter(|&n| key(n) != Some("pay_A"));
    app.wait_handled(others.clone()).await;
    for event in &events {
        wait_status(&client, event, "delivered").await;
    }
    // A backup now holds B's, C's and the keyless events, A's three still held, and no
    // checkpoint past 0 (event 1 is not processed).
    let backup = dir.path().join("backup.db");
    sqlx::query(&format!("VACUUM INTO '{}'", backup.display()))
        .execute(app.shop.store.sqlite_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(app.shop.store.held_count(&endpoint).await.unwrap(), 3);
    assert_eq!(
        app.shop.store.checkpoint(&endpoint).await.unwrap().sequence,
        0
    );
    app.shop.a_stuck.store(false, Ordering::SeqCst);
    app.wait_handled(1..=12).await;
    assert_in_order_per_key(&app.handled().await);

    // Down longer than the schedule: 13–16 go dead.
    app.down.store(true, Ordering::SeqCst);
    for n in 13..=16 {
        let event = emit(&client, n).await;
        wait_status(&client, &event, "dead").await;
        events.push(event);
    }
    app.stop().await;

    // Restored from the backup: A's three are lost (processed after it; their held rows are
    // back), 13–16 never arrived. In order, from the feed, with no replay.
    copy_db(&backup, &db);
    let app = start(&db, &secret, config(), false).await;
    point(&client, &endpoint, &app.url).await;
    app.wait_handled(1..=16).await;
    let handled = app.handled().await;
    assert_in_order_per_key(&handled);
    let start = Instant::now();
    while app.shop.store.checkpoint(&endpoint).await.unwrap().sequence < 16
        || app.shop.store.held_count(&endpoint).await.unwrap() > 0
    {
        assert!(
            start.elapsed() < SECS_20,
            "checkpoint or held rows stay behind"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for event in &events[12..] {
        let deliveries = client
            .event_deliveries(&event.as_str().into())
            .await
            .unwrap()
            .data;
        assert_eq!(deliveries.len(), 1, "{deliveries:?}");
        assert_eq!(deliveries[0].status.as_str(), "dead");
    }
    app.stop().await;
    sender_server.shutdown().await;
}

/// A signed delivery of event `id` (number `n`), with `headers` added.
pub(crate) async fn deliver(
    url: &str,
    secret: &str,
    id: &str,
    n: u32,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let body = json!({
        "id": id, "type": "payment.updated", "api_version": "2026-11-01",
        "created_at": "2026-12-02T00:00:00Z", "data": {"n": n}
    })
    .to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let signature = kxp_verify::Signer::from_secret_list(secret)
        .unwrap()
        .sign(now, body.as_bytes())
        .to_string();
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header(kxp_verify::SIGNATURE_HEADER, signature)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_mode_holds_only_verified_deliveries_and_only_its_own_requests_pass() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "whsec_ordered_test";
    // No sender behind it: only what the middleware answers is looked at here.
    let config = CatchUpConfig::new(
        "http://127.0.0.1:9",
        Credential::Secret(kxp_verify::Secret::new(secret).unwrap()),
    )
    .with_interval(Duration::from_secs(3600));
    let app = start(&dir.path().join("receiver.db"), secret, config, false).await;
    let endpoint = [(kxp_verify::ENDPOINT_ID_HEADER, "ep_x")];

    let held = (200, r#"{"outcome":"held"}"#.to_owned());
    assert_eq!(deliver(&app.url, secret, "evt_1", 2, &endpoint).await, held);
    assert_eq!(deliver(&app.url, secret, "evt_1", 2, &endpoint).await, held);
    // A delivery claiming to be the catch-up's own request is held all the same.
    let forged = [
        (kxp_verify::ENDPOINT_ID_HEADER, "ep_x"),
        (kxp_catchup::CATCH_UP_HEADER, "1"),
    ];
    assert_eq!(deliver(&app.url, secret, "evt_2", 3, &forged).await, held);
    assert_eq!(app.shop.store.held_count("ep_x").await.unwrap(), 2);
    // Not signed with the secret: the verifier's answer, nothing held.
    let (status, body) = deliver(&app.url, "whsec_other", "evt_3", 4, &endpoint).await;
    assert_eq!(
        (status, body.as_str()),
        (401, r#"{"error":"signature_mismatch"}"#)
    );
    assert_eq!(app.shop.store.held_count("ep_x").await.unwrap(), 2);
    assert!(app.handled().await.is_empty(), "held, not handled");
    // No endpoint named and none configured: handled at once, outside any order.
    let (status, body) = deliver(&app.url, secret, "evt_4", 6, &[]).await;
    assert_eq!((status, body.as_str()), (200, r#"{"outcome":"processed"}"#));
    assert_eq!(app.handled().await, [6]);
    // The dedup database out of reach: nothing is held, so no 200; the sender comes back.
    app.shop.store.close().await;
    let (status, body) = deliver(&app.url, secret, "evt_5", 7, &endpoint).await;
    assert_eq!((status, body.as_str()), (503, r#"{"outcome":"failed"}"#));
    app.stop().await;
}

/// An erased event of a key is processed for the key: the key's next event, held in ordered
/// mode behind it, is handed over once the feed shows the erased one, and nothing stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_event_lets_its_keys_next_event_through() {
    let dir = tempfile::tempdir().unwrap();
    let (sender_server, client) = sender(dir.path()).await;
    let base = format!("http://{}", sender_server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let id = kxp_api::EndpointId::from(endpoint.clone());
    client.pause_endpoint(&id).await.unwrap();
    for n in 1..=3 {
        let mut event = kxp_api::NewEvent::new("payment.updated", &json!({"n": n}))
            .unwrap()
            .ordering_key("pay_A");
        if n == 2 {
            event = event.tags(["customer:cus_9"]);
        }
        client.create_event(&event, None).await.unwrap();
    }
    let erasure = client.create_erasure("customer:cus_9").await.unwrap();
    while client.erasure(&erasure.id).await.unwrap().status != kxp_api::ErasureStatus::Done {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let config = CatchUpConfig::new(
        &base,
        Credential::Secret(kxp_verify::Secret::new(&secret).unwrap()),
    )
    .with_delay(Duration::from_millis(200))
    .with_interval(Duration::from_millis(500));
    let app = start(&dir.path().join("receiver.db"), &secret, config, false).await;
    point(&client, &endpoint, &app.url).await;
    client.resume_endpoint(&id).await.unwrap();
    app.wait_handled([1, 3]).await;
    assert_eq!(app.handled().await, vec![1, 3]);
    let start = Instant::now();
    while app.shop.store.checkpoint(&endpoint).await.unwrap().sequence < 3
        || app.shop.store.held_count(&endpoint).await.unwrap() > 0
    {
        assert!(
            start.elapsed() < SECS_20,
            "checkpoint or held rows stay behind"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    app.stop().await;
    sender_server.shutdown().await;
}
