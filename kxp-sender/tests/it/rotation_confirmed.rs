//! Rotation the receiver confirms: `"expire_old": "when_confirmed"` against a real kxp-axum
//! receiver, which names in `X-Kxp-Verified-Key` the key that verified each delivery. The
//! merchant deploys the new secret late, one instance answers without the header for a while,
//! and the old secret stops signing only once enough deliveries in a row were verified with the
//! new one; `GET /v1/endpoints/{id}` and the console show each step. A receiver that never
//! sends the header falls back to the overlap. The flow runs on PostgreSQL too when
//! `KXP_TEST_DATABASE_URL` is set.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use kxp_api::{EndpointDetails, EndpointId, ExpireOld, PortalScope, ReceiverKey, RotateSecret};
use kxp_axum::{Receiver as KxpReceiver, VerifiedEvent, VerifyLayer};
use kxp_verify::key_fingerprint;
use serde_json::json;
use tower::ServiceExt;

use crate::console::Browser;
use crate::console_pages::{account_page, page};
use crate::support::{Api, Database, Receiver, Sender, sender};

const SECS_10: Duration = Duration::from_secs(10);

/// What the merchant's receiver runs now: swapped as a deployment would swap it.
#[derive(Clone)]
struct Deployed(Arc<Mutex<Router>>);

impl Deployed {
    /// A receiver on 127.0.0.1 running `app`; its URL.
    async fn start(app: Router) -> (Deployed, String) {
        let deployed = Deployed(Arc::new(Mutex::new(app)));
        let front = Router::new()
            .fallback(|State(d): State<Deployed>, request: Request| async move {
                let app = d.0.lock().unwrap().clone();
                let response: Response = app.oneshot(request).await.unwrap();
                response
            })
            .with_state(deployed.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, front).await.unwrap() });
        (deployed, url)
    }

    fn deploy(&self, app: Router) {
        *self.0.lock().unwrap() = app;
    }
}

/// A kxp-axum receiver verifying with `secrets` (comma-separated, newest first).
fn kxp_receiver(secrets: &str) -> Router {
    let verifier = kxp_verify::Verifier::from_secret_list(secrets).unwrap();
    Router::new().route(
        "/hook",
        post(|_: VerifiedEvent| async { "ok" }).layer(VerifyLayer::new(KxpReceiver::new(verifier))),
    )
}

/// A receiver that answers 200 and never says which key it used (an older instance).
fn silent_receiver() -> Router {
    Router::new().route("/hook", post(|| async { "ok" }))
}

async fn details(api: &Api, endpoint: &EndpointId) -> EndpointDetails {
    api.client.endpoint(endpoint).await.unwrap()
}

/// Polls the endpoint until `done` holds: the confirmation is recorded just after the
/// delivery's own commit, so a reader can see one without the other for a moment.
async fn until(
    api: &Api,
    endpoint: &EndpointId,
    what: &str,
    done: impl Fn(&EndpointDetails) -> bool,
) -> EndpointDetails {
    let start = Instant::now();
    loop {
        let d = details(api, endpoint).await;
        if done(&d) {
            return d;
        }
        assert!(start.elapsed() < SECS_10, "waiting for {what}: {d:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Emits one event and waits until it is delivered.
async fn deliver_one(api: &Api, n: usize) {
    let event = api.emit("payment.succeeded", json!({"n": n})).await;
    api.wait_for(&event, "delivered", SECS_10).await;
}

each_backend!(the_old_secret_stops_once_the_receiver_confirms_the_new_one);
on_citus!(the_old_secret_stops_once_the_receiver_confirms_the_new_one);

async fn the_old_secret_stops_once_the_receiver_confirms_the_new_one(database: Database) {
    let s = database.sender("0s,50ms").await;
    let (deployed, url) = Deployed::start(silent_receiver()).await;
    let (id, old) = s.api.endpoint(&url, json!({})).await;
    let endpoint = EndpointId::from(id.as_str());
    let old_key = key_fingerprint(old.as_bytes()).to_string();
    deployed.deploy(kxp_receiver(&old));

    // Before any rotation: one secret, verified by the receiver, nothing under way.
    deliver_one(&s.api, 0).await;
    let d = until(&s.api, &endpoint, "the first confirmation", |d| {
        d.secrets[0].last_verified_at.is_some()
    })
    .await;
    assert_eq!(d.secrets.len(), 1);
    assert_eq!(d.secrets[0].fingerprint, old_key);
    assert_eq!(d.secrets[0].expires_at, None);
    assert_eq!(d.rotation, None);

    let rotation = RotateSecret::overlap("1h")
        .when_confirmed()
        .confirmations(5);
    let rotated = s
        .api
        .client
        .rotate_secret(&endpoint, &rotation)
        .await
        .unwrap();
    let new = rotated.secret.as_ref().unwrap().expose().to_owned();
    let new_key = key_fingerprint(new.as_bytes()).to_string();
    let d = details(&s.api, &endpoint).await;
    let keys: Vec<&str> = d.secrets.iter().map(|s| s.fingerprint.as_str()).collect();
    assert_eq!(keys, [new_key.as_str(), old_key.as_str()]);
    assert_eq!(
        d.secrets[1].expires_at,
        Some(rotated.previous_expires_at.clone())
    );
    let r = d.rotation.expect("a rotation waiting for the receiver");
    assert_eq!(r.expire_old, ExpireOld::WhenConfirmed);
    assert_eq!(
        (r.secret.as_str(), r.confirmations, r.needed),
        (new_key.as_str(), 0, 5)
    );
    assert_eq!(r.receiver, ReceiverKey::Unconfirmed);
    assert_eq!(r.ends_by, rotated.previous_expires_at);

    // The merchant has not deployed the new secret: deliveries carry both signatures, the
    // receiver verifies with the old one, and nothing ends.
    for n in 1..=3 {
        deliver_one(&s.api, n).await;
    }
    let d = until(&s.api, &endpoint, "the receiver on the old secret", |d| {
        d.rotation
            .as_ref()
            .is_some_and(|r| r.receiver == ReceiverKey::Old)
    })
    .await;
    assert_eq!(d.secrets.len(), 2);
    assert_eq!(d.rotation.as_ref().unwrap().confirmations, 0);
    let console = console_text(&s, &id).await;
    assert!(console.contains("Still on the old secret"), "{console}");

    // Deployed with both, newest first: each delivery is now verified with the new secret.
    deployed.deploy(kxp_receiver(&format!("{new},{old}")));
    for n in 4..=6 {
        deliver_one(&s.api, n).await;
    }
    let d = until(&s.api, &endpoint, "three confirmations", |d| {
        d.rotation.as_ref().is_some_and(|r| r.confirmations == 3)
    })
    .await;
    assert_eq!(d.rotation.as_ref().unwrap().receiver, ReceiverKey::New);
    assert!(d.secrets[0].last_verified_at.is_some());
    let console = console_text(&s, &id).await;
    assert!(console.contains("The merchant has switched"), "{console}");
    assert!(console.contains("3 of 5 deliveries in a row"), "{console}");
    assert!(
        !console.contains(&new) && !console.contains(&old),
        "{console}"
    );

    // One instance still answers without saying which key it used: the count starts again.
    deployed.deploy(silent_receiver());
    deliver_one(&s.api, 7).await;
    until(&s.api, &endpoint, "the count started again", |d| {
        d.rotation.as_ref().is_some_and(|r| r.confirmations == 0)
    })
    .await;

    // Five in a row with the new secret end the old one, long before its hour is up.
    deployed.deploy(kxp_receiver(&format!("{new},{old}")));
    for n in 8..=12 {
        deliver_one(&s.api, n).await;
    }
    let d = until(&s.api, &endpoint, "the rotation's end", |d| {
        d.rotation.is_none()
    })
    .await;
    let keys: Vec<&str> = d.secrets.iter().map(|s| s.fingerprint.as_str()).collect();
    assert_eq!(keys, [new_key.as_str()], "the old secret stopped signing");

    // From now on only the new secret signs: a receiver holding only it verifies everything.
    deployed.deploy(kxp_receiver(&new));
    deliver_one(&s.api, 13).await;
    s.server.shutdown().await;
}

/// The text of the endpoint's console page, for a merchant session of the sender's account.
async fn console_text(s: &Sender, endpoint: &str) -> String {
    let b = Browser::of(s);
    let cookie = b.session(&s.api.client, PortalScope::Read).await;
    let (home, _) = account_page(&b, &cookie).await;
    let (status, html) = page(&b, &format!("{home}/endpoints/{endpoint}"), &cookie).await;
    assert_eq!(status, 200, "{html}");
    html
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_confirms_falls_back_to_the_overlap() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let endpoint = EndpointId::from(id.as_str());
    let rotation = RotateSecret::overlap("1s").when_confirmed();
    s.api
        .client
        .rotate_secret(&endpoint, &rotation)
        .await
        .unwrap();
    for n in 0..3 {
        deliver_one(&s.api, n).await;
    }
    let d = details(&s.api, &endpoint).await;
    let r = d.rotation.expect("still waiting for the receiver");
    assert_eq!(
        (r.confirmations, r.needed),
        (0, kxp_api::DEFAULT_CONFIRMATIONS)
    );
    assert_eq!(r.receiver, ReceiverKey::Unconfirmed);
    assert_eq!(d.secrets.len(), 2);
    assert!(d.secrets.iter().all(|s| s.last_verified_at.is_none()));

    // The overlap ends it all the same.
    let d = until(&s.api, &endpoint, "the overlap's end", |d| {
        d.secrets.len() == 1
    })
    .await;
    assert_eq!(d.rotation, None);
    deliver_one(&s.api, 3).await;
    let signature = receiver.seen().last().unwrap().headers["x-kxp-signature"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(signature.matches("v1=").count(), 1, "{signature}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_rotation_says_when_to_expire_the_old_secret_or_is_refused() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let path = format!("/v1/endpoints/{id}/rotate-secret");
    for (body, says) in [
        (json!({"confirmations": 5}), "when_confirmed"),
        (
            json!({"expire_old": "after_overlap", "confirmations": 5}),
            "when_confirmed",
        ),
        (
            json!({"expire_old": "when_confirmed", "confirmations": 0}),
            "1 to 1000",
        ),
        (
            json!({"expire_old": "when_confirmed", "confirmations": 1001}),
            "1 to 1000",
        ),
        (json!({"expire_old": "sometimes"}), "sometimes"),
    ] {
        let (status, answer) = s.api.call("POST", &path, Some(body.clone())).await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"], "invalid_request", "{answer}");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
    let endpoint = EndpointId::from(id.as_str());
    assert_eq!(
        details(&s.api, &endpoint).await.secrets.len(),
        1,
        "nothing rotated"
    );

    // No overlap, nothing to wait for: the old secret is gone at once.
    let now = RotateSecret::overlap("0s").when_confirmed();
    s.api.client.rotate_secret(&endpoint, &now).await.unwrap();
    let d = details(&s.api, &endpoint).await;
    assert_eq!((d.secrets.len(), d.rotation), (1, None));

    // A rotation after a when_confirmed one replaces it: its overlap alone decides.
    let confirmed = RotateSecret::overlap("1h").when_confirmed();
    s.api
        .client
        .rotate_secret(&endpoint, &confirmed)
        .await
        .unwrap();
    assert!(details(&s.api, &endpoint).await.rotation.is_some());
    let plain = RotateSecret::overlap("1h");
    s.api.client.rotate_secret(&endpoint, &plain).await.unwrap();
    let d = details(&s.api, &endpoint).await;
    assert_eq!((d.secrets.len(), d.rotation), (3, None));
    s.server.shutdown().await;
}
