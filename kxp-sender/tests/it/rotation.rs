//! Secret rotation: `POST /v1/endpoints/{id}/rotate-secret` while deliveries flow, against a
//! receiver that switches secrets mid-way, with zero failed verifications; then the overlap,
//! the cap on live secrets and the request's validation. The flowing scenario runs on
//! PostgreSQL too when `KXP_TEST_DATABASE_URL` is set.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use kxp_api::{Delivery, DeliveryQuery, DeliveryStatus, EndpointId, RotateSecret};
use kxp_verify::{Secret, Signer, Verifier};
use serde_json::{Value, json};

use crate::support::{Api, Database, Receiver, Sender, sender, verifies};

const SECS_10: Duration = Duration::from_secs(10);

/// The rotation's overlap in the flowing scenario.
const OVERLAP: Duration = Duration::from_secs(1);

// ---- a receiver that switches secrets ----

/// One request as the switching receiver handled it.
#[derive(Clone)]
struct Handled {
    signature: String,
    body: Bytes,
    v1s: usize,
    verified: bool,
}

#[derive(Default)]
struct Switch {
    /// The one secret it verifies with.
    current: String,
    /// The secret to switch to once the traffic shows the rotation.
    next: Option<String>,
    handled: Vec<Handled>,
    failed: usize,
}

/// A receiver configured with one secret at a time: the old one until it has been given the
/// new one *and* sees a delivery signed after the rotation (two `v1`s), then only the new one.
#[derive(Clone)]
struct Switching {
    url: String,
    state: Arc<Mutex<Switch>>,
}

impl Switching {
    async fn start() -> Switching {
        let state = Arc::new(Mutex::new(Switch::default()));
        let app = Router::new().fallback(switching).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Switching { url, state }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Switch> {
        self.state.lock().unwrap()
    }
}

async fn switching(
    State(state): State<Arc<Mutex<Switch>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let signature = headers
        .get("x-kxp-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let v1s = v1_count(&signature);
    let mut state = state.lock().unwrap();
    if v1s >= 2
        && let Some(next) = state.next.take()
    {
        state.current = next;
    }
    let verified = Verifier::from_secret_list(&state.current)
        .unwrap()
        .verify_now(signature.as_bytes(), &body)
        .is_ok();
    if !verified {
        state.failed += 1;
    }
    state.handled.push(Handled {
        signature,
        body,
        v1s,
        verified,
    });
    if verified {
        StatusCode::OK
    } else {
        StatusCode::UNAUTHORIZED
    }
}

fn v1_count(signature: &str) -> usize {
    signature
        .split(',')
        .filter(|item| item.trim().starts_with("v1="))
        .count()
}

fn verifies_with(handled: &Handled, secret: &str) -> bool {
    Verifier::from_secret_list(secret)
        .unwrap()
        .verify_now(handled.signature.as_bytes(), &handled.body)
        .is_ok()
}

// ---- the flowing scenario ----

each_backend!(rotating_while_deliveries_flow_fails_no_verification);
on_citus!(rotating_while_deliveries_flow_fails_no_verification);

async fn rotating_while_deliveries_flow_fails_no_verification(database: Database) {
    // One attempt at a time per endpoint, so the receiver sees deliveries in the order they
    // were signed, and "seeing the rotation" is a point in the traffic rather than a race.
    let s = database
        .sender_with("0s,50ms,100ms", |c| c.per_endpoint_concurrency = 1)
        .await;
    let receiver = Switching::start().await;
    let (endpoint_id, old) = s.api.endpoint(&receiver.url, json!({})).await;
    receiver.lock().current = old.clone();

    // Events go in continuously from another task until told to stop.
    let emitted = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let emitter = {
        let (api, emitted, count, stop) =
            (s.api.clone(), emitted.clone(), count.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) && n < 1000 {
                let id = api.emit("payment.succeeded", json!({"n": n})).await;
                emitted.lock().unwrap().push(id);
                count.fetch_add(1, Ordering::SeqCst);
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    wait_until(|| count.load(Ordering::SeqCst) >= 20).await;
    wait_until(|| receiver.lock().handled.len() >= 10).await;

    // Rotate mid-way; the merchant then deploys the new secret on the receiver.
    let rotated = s
        .api
        .client
        .rotate_secret(&endpoint_id.as_str().into(), &RotateSecret::overlap("1s"))
        .await
        .unwrap();
    let rotated_at = Instant::now();
    let new = rotated.secret.as_ref().unwrap().expose().to_owned();
    assert_eq!(new.len(), 64);
    assert_ne!(new, old);
    receiver.lock().next = Some(new.clone());

    // Keep the traffic going through the overlap and past it.
    tokio::time::sleep(OVERLAP + Duration::from_millis(800)).await;
    wait_until(|| {
        receiver
            .lock()
            .handled
            .iter()
            .rev()
            .take(5)
            .all(|h| h.v1s == 1)
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    emitter.await.unwrap();
    assert!(
        rotated_at.elapsed() < Duration::from_secs(30),
        "the scenario ran slowly"
    );

    // Every event delivered, each by its first attempt.
    let emitted: Vec<String> = emitted.lock().unwrap().clone();
    let delivered = wait_delivered(&s.api, &endpoint_id, emitted.len()).await;
    assert!(
        delivered.iter().all(|d| d.attempts == 1),
        "a delivery needed a retry: {:?}",
        delivered.iter().find(|d| d.attempts != 1)
    );
    let delivered_events: BTreeSet<&str> = delivered.iter().map(|d| d.event_id.as_str()).collect();
    let emitted_events: BTreeSet<&str> = emitted.iter().map(String::as_str).collect();
    assert_eq!(delivered_events, emitted_events);

    let live = live_secrets(&s, &endpoint_id).await;
    assert_eq!(
        live,
        [new.as_str()],
        "after the overlap the old secret is gone"
    );
    s.server.shutdown().await;

    let state = receiver.lock();
    assert_eq!(state.failed, 0, "failed verifications");
    assert!(state.handled.iter().all(|h| h.verified));
    assert_eq!(state.handled.len(), emitted.len(), "one request per event");
    assert!(
        state.next.is_none(),
        "the receiver switched to the new secret"
    );

    // The traffic in order: one v1 (old), then two (new, old) during the overlap, then one
    // (new) after it; and never anything else.
    let phases: Vec<usize> = state.handled.iter().map(|h| h.v1s).collect();
    let before = phases.iter().take_while(|&&n| n == 1).count();
    let during = phases[before..].iter().take_while(|&&n| n == 2).count();
    let after = phases.len() - before - during;
    assert!(before > 0 && during > 0 && after > 0, "{phases:?}");
    assert!(
        phases[before + during..].iter().all(|&n| n == 1),
        "{phases:?}"
    );
    for h in &state.handled[..before] {
        assert!(verifies_with(h, &old) && !verifies_with(h, &new));
    }
    for h in &state.handled[before..before + during] {
        assert_eq!(
            h.signature,
            signed_with(&h.signature, &h.body, &[&new, &old])
        );
    }
    for h in &state.handled[before + during..] {
        assert!(
            verifies_with(h, &new) && !verifies_with(h, &old),
            "after the overlap the old secret is gone"
        );
    }
}

async fn wait_until(mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls the endpoint's delivered deliveries until there are `expected`; returns them.
async fn wait_delivered(api: &Api, endpoint_id: &str, expected: usize) -> Vec<Delivery> {
    let start = Instant::now();
    let query = DeliveryQuery::default()
        .endpoint(endpoint_id.into())
        .limit(500);
    loop {
        let all = api.client.deliveries(&query).await.unwrap().data;
        assert!(all.len() < 500, "more deliveries than a page");
        let delivered = |d: &&Delivery| d.status == DeliveryStatus::Delivered;
        if all.len() == expected && all.iter().all(|d| delivered(&d)) {
            return all;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} of {expected} deliveries, not all delivered: {:?}",
            all.len(),
            all.iter().find(|d| !delivered(d))
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---- the rules ----

/// The endpoint's live secrets, newest first, as the store reads them.
async fn live_secrets(s: &Sender, endpoint_id: &str) -> Vec<String> {
    s.server
        .db()
        .live_secrets(&EndpointId::from(endpoint_id))
        .await
        .unwrap()
}

async fn rotate(s: &Sender, endpoint_id: &str, body: Option<Value>) -> (u16, Value) {
    s.api
        .call(
            "POST",
            &format!("/v1/endpoints/{endpoint_id}/rotate-secret"),
            body,
        )
        .await
}

/// Delivers one event to `receiver` and returns its `X-Kxp-Signature` and body.
async fn deliver_one(s: &Sender, receiver: &Receiver) -> (String, Bytes) {
    let before = receiver.seen().len();
    let event = s.api.emit("payment.succeeded", json!({})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let seen = &receiver.seen()[before];
    (seen.header("x-kxp-signature"), seen.body.clone())
}

/// The header the sender would write with `secrets`, in this order, at the header's own time.
fn signed_with(signature: &str, body: &[u8], secrets: &[&str]) -> String {
    let t: u64 = signature
        .split(',')
        .find_map(|item| item.trim().strip_prefix("t="))
        .unwrap()
        .parse()
        .unwrap();
    let signer = Signer::with_secrets(secrets.iter().map(|s| Secret::new(s).unwrap())).unwrap();
    signer.sign(t, body).to_string()
}

fn unix_ms_of(rfc3339: &Value) -> i64 {
    kxp_sender::parse_rfc3339(rfc3339.as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn rotation_overlaps_by_a_day_by_default_and_signs_newest_first() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, first) = s.api.endpoint(&receiver.url, json!({})).await;

    let (status, rotated) = rotate(&s, &id, None).await;
    assert_eq!(status, 200, "{rotated}");
    let second = rotated["secret"].as_str().unwrap().to_owned();
    assert_eq!(second.len(), 64);
    let day_later = kxp_sender::now_ms() + 24 * 3_600_000;
    let expires = unix_ms_of(&rotated["previous_expires_at"]);
    assert!(
        (day_later - 5000..=day_later).contains(&expires),
        "{rotated}"
    );

    let (signature, body) = deliver_one(&s, &receiver).await;
    assert_eq!(v1_count(&signature), 2, "{signature}");
    assert_eq!(
        signature,
        signed_with(&signature, &body, &[&second, &first])
    );

    // The same with an explicit overlap; an endpoint's secrets are its own.
    let (status, rotated) = rotate(&s, &id, Some(json!({"overlap": "30m"}))).await;
    assert_eq!(status, 200, "{rotated}");
    let third = rotated["secret"].as_str().unwrap().to_owned();
    let expires = unix_ms_of(&rotated["previous_expires_at"]);
    let half_hour_later = kxp_sender::now_ms() + 30 * 60_000;
    assert!((half_hour_later - 5000..=half_hour_later).contains(&expires));
    let (signature, body) = deliver_one(&s, &receiver).await;
    assert_eq!(
        signature,
        signed_with(&signature, &body, &[&third, &second, &first])
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_overlap_of_zero_retires_the_old_secret_at_once() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, old) = s.api.endpoint(&receiver.url, json!({})).await;
    let (status, rotated) = rotate(&s, &id, Some(json!({"overlap": "0s"}))).await;
    assert_eq!(status, 200, "{rotated}");
    let new = rotated["secret"].as_str().unwrap();
    let expires = unix_ms_of(&rotated["previous_expires_at"]);
    assert!(expires <= kxp_sender::now_ms());
    assert_eq!(live_secrets(&s, &id).await, [new]);
    deliver_one(&s, &receiver).await;
    let seen = receiver.seen();
    assert_eq!(v1_count(&seen[0].header("x-kxp-signature")), 1);
    assert!(verifies(&seen[0], new));
    assert!(!verifies(&seen[0], &old));
    s.server.shutdown().await;
}

#[tokio::test]
async fn live_secrets_are_capped_at_what_a_signature_carries() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let mut secrets = Vec::new();
    for _ in 1..kxp_verify::MAX_SECRETS {
        let (status, rotated) = rotate(&s, &id, Some(json!({"overlap": "1h"}))).await;
        assert_eq!(status, 200, "{rotated}");
        secrets.push(rotated["secret"].as_str().unwrap().to_owned());
    }
    let live = live_secrets(&s, &id).await;
    assert_eq!(live.len(), kxp_verify::MAX_SECRETS);

    // One more would make a fifth: refused, and nothing changes.
    let (status, refused) = rotate(&s, &id, Some(json!({"overlap": "1h"}))).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"], "too_many_secrets");
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("4 live secrets"), "{message}");
    assert!(message.contains("\"overlap\": \"0s\""), "{message}");
    assert_eq!(live_secrets(&s, &id).await, live);
    let (signature, _) = deliver_one(&s, &receiver).await;
    assert_eq!(v1_count(&signature), kxp_verify::MAX_SECRETS);

    // An overlap of zero retires them all, so it is allowed at the cap.
    let (status, rotated) = rotate(&s, &id, Some(json!({"overlap": "0s"}))).await;
    assert_eq!(status, 200, "{rotated}");
    let newest = rotated["secret"].as_str().unwrap();
    assert_eq!(live_secrets(&s, &id).await, [newest]);
    s.server.shutdown().await;
}

#[tokio::test]
async fn rotation_requests_are_checked() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    for body in [
        json!({"overlap": "soon"}),
        json!({"overlap": "1 h"}),
        json!({"overlap": 3600}),
        json!({"overlap": "8d"}),
        json!({"ttl": "1h"}),
    ] {
        let (status, error) = rotate(&s, &id, Some(body.clone())).await;
        assert_eq!(status, 422, "{body}: {error}");
        assert_eq!(error["error"], "invalid_request", "{body}: {error}");
    }
    let (status, _) = rotate(&s, "ep_nope", None).await;
    assert_eq!(status, 404);

    // Another account's endpoint looks like one that does not exist.
    s.server
        .db()
        .create_account("other", Some("kxp_other_key"))
        .await
        .unwrap();
    let other = s.api.with_key("kxp_other_key");
    let (status, _) = other
        .call(
            "POST",
            &format!("/v1/endpoints/{id}/rotate-secret"),
            Some(json!({"overlap": "0s"})),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(live_secrets(&s, &id).await, [secret]);

    // A week is the longest overlap.
    let (status, rotated) = rotate(&s, &id, Some(json!({"overlap": "7d"}))).await;
    assert_eq!(status, 200, "{rotated}");
    s.server.shutdown().await;
}
