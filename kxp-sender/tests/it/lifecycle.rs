//! The endpoint lifecycle over loopback: the challenge handshake at registration and on a URL
//! change, `PATCH` of every field with the same validation as creation, pause and resume (held
//! deliveries burn no attempt), and deletion (pending deliveries end dead, visibly). The pause
//! and delete scenarios run on PostgreSQL too when `KXP_TEST_DATABASE_URL` is set.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::support::{Database, Receiver, Reply, Sender, sender, typed, value, values};

const SECS_10: Duration = Duration::from_secs(10);

// ---- receivers that answer (or fail) the challenge ----

/// How a challenge receiver answers `GET ?challenge=<token>`.
#[derive(Clone, Copy)]
enum Answer {
    /// The token and a newline (trailing whitespace is allowed).
    EchoWithNewline,
    /// 200 with something else.
    Body(&'static str),
    /// This status, echoing the token all the same.
    Status(u16),
    /// Nothing until this long.
    Hang(Duration),
}

/// A receiver that answers challenges as scripted and records every request line.
struct Challenged {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Challenged {
    async fn start(answer: Answer) -> Challenged {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .fallback(challenged)
            .with_state((answer, requests.clone()));
        Challenged {
            url: serve(app).await,
            requests,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

async fn challenged(
    State((answer, requests)): State<(Answer, Arc<Mutex<Vec<String>>>)>,
    request: Request,
) -> Response {
    requests
        .lock()
        .unwrap()
        .push(format!("{} {}", request.method(), request.uri()));
    let token = request
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("challenge=")))
        .unwrap_or_default()
        .to_owned();
    match answer {
        Answer::EchoWithNewline => format!("{token}\r\n").into_response(),
        Answer::Body(body) => body.into_response(),
        Answer::Status(code) => (StatusCode::from_u16(code).unwrap(), token).into_response(),
        Answer::Hang(d) => {
            tokio::time::sleep(d).await;
            token.into_response()
        }
    }
}

/// A real kxp-axum receiver (which answers the challenge itself), recording request lines.
async fn kxp_axum_receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let requests = Arc::new(Mutex::new(Vec::new()));
    // The receiver is deployed before the endpoint exists, so before its secret is known: the
    // challenge is answered whatever secret it holds.
    let verifier = kxp_verify::Verifier::from_secret_list(&"0".repeat(64)).unwrap();
    let seen = requests.clone();
    let verify = kxp_axum::VerifyLayer::new(kxp_axum::Receiver::new(verifier));
    let app = Router::new()
        .route("/hook", post(|| async { "ok" }).layer(verify))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            seen.lock()
                .unwrap()
                .push(format!("{} {}", request.method(), request.uri()));
            next.run(request)
        }));
    (serve(app).await, requests)
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// The challenge token of a recorded request line, checked to be 32 lowercase hex digits.
fn token_of(line: &str) -> String {
    let token = line.rsplit("challenge=").next().unwrap().to_owned();
    assert_eq!(token.len(), 32, "{line}");
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{line}"
    );
    token
}

/// The account's endpoints (one page), as JSON.
async fn list_endpoints(s: &Sender) -> Vec<Value> {
    let page = s
        .api
        .client
        .list_endpoints(&kxp_api::PageQuery::default())
        .await
        .unwrap_or_else(|e| panic!("GET /v1/endpoints: {e}"));
    values(page.data)
}

async fn endpoint_count(s: &Sender) -> usize {
    list_endpoints(s).await.len()
}

/// Raw: for the endpoints that must not be found.
async fn get_endpoint(s: &Sender, id: &str) -> (u16, Value) {
    s.api
        .call("GET", &format!("/v1/endpoints/{id}"), None)
        .await
}

/// The endpoint, as JSON.
/// The endpoint as `GET /v1/endpoints/{id}` shows it, without its secrets and rotation (what
/// the other endpoint routes answer).
async fn endpoint_of(s: &Sender, id: &str) -> Value {
    let details = s
        .api
        .client
        .endpoint(&id.into())
        .await
        .unwrap_or_else(|e| panic!("GET /v1/endpoints/{id}: {e}"));
    value(&details.endpoint)
}

/// Raw: for the patches that must be refused, and answers checked as sent.
async fn patch(s: &Sender, id: &str, body: Value) -> (u16, Value) {
    s.api
        .call("PATCH", &format!("/v1/endpoints/{id}"), Some(body))
        .await
}

/// Applies `body` (an `EndpointPatch` as JSON) through the typed client; the endpoint as JSON.
async fn patched(s: &Sender, id: &str, body: Value) -> Value {
    let endpoint = s
        .api
        .client
        .update_endpoint(&id.into(), &typed(body))
        .await
        .unwrap_or_else(|e| panic!("PATCH /v1/endpoints/{id}: {e}"));
    assert_eq!(endpoint.rotated, None, "no change of format, no rotation");
    value(&endpoint.endpoint)
}

/// Raw: for the unknown ids.
async fn post_to(s: &Sender, path: &str) -> (u16, Value) {
    s.api.call("POST", path, None).await
}

/// Pauses the endpoint; the endpoint as JSON.
async fn pause(s: &Sender, id: &str) -> Value {
    let endpoint = s
        .api
        .client
        .pause_endpoint(&id.into())
        .await
        .unwrap_or_else(|e| panic!("POST /v1/endpoints/{id}/pause: {e}"));
    value(&endpoint)
}

/// Resumes the endpoint; the endpoint as JSON.
async fn resume(s: &Sender, id: &str) -> Value {
    let endpoint = s
        .api
        .client
        .resume_endpoint(&id.into())
        .await
        .unwrap_or_else(|e| panic!("POST /v1/endpoints/{id}/resume: {e}"));
    value(&endpoint)
}

/// Registers `body` (a `NewEndpoint` as JSON) through the typed client.
async fn create(s: &Sender, body: Value) -> kxp_api::EndpointCreated {
    s.api
        .client
        .create_endpoint(&typed(body))
        .await
        .unwrap_or_else(|e| panic!("POST /v1/endpoints: {e}"))
}

// ---- the challenge ----

#[tokio::test]
async fn registration_performs_the_challenge_and_a_kxp_receiver_passes_it() {
    let s = sender("0s").await;
    let (url, requests) = kxp_axum_receiver().await;
    create(&s, json!({"url": url})).await;
    let lines = requests.lock().unwrap().clone();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("GET /hook?challenge="), "{lines:?}");
    token_of(&lines[0]);

    // A URL with a query keeps it: the token is appended with `&`.
    let with_query = format!("{url}?tenant=7");
    create(&s, json!({"url": with_query})).await;
    let lines = requests.lock().unwrap().clone();
    assert!(
        lines[1].starts_with("GET /hook?tenant=7&challenge="),
        "{lines:?}"
    );
    token_of(&lines[1]);

    // Every challenge has its own token; trailing whitespace after it is fine.
    let echo = Challenged::start(Answer::EchoWithNewline).await;
    create(&s, json!({"url": echo.url})).await;
    assert_ne!(token_of(&lines[0]), token_of(&echo.requests()[0]));
    assert_eq!(endpoint_count(&s).await, 3);
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_failed_challenge_refuses_the_endpoint_and_stores_nothing() {
    let s = sender("0s").await;
    let wrong = Challenged::start(Answer::Body("ok")).await;
    let long = Challenged::start(Answer::Body(Box::leak("a".repeat(300).into_boxed_str()))).await;
    let missing = Challenged::start(Answer::Status(404)).await;
    let erroring = Challenged::start(Answer::Status(500)).await;
    let slow = Challenged::start(Answer::Hang(Duration::from_secs(3))).await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/hook", listener.local_addr().unwrap())
    };
    let cases = [
        (
            &wrong.url,
            vec!["200 OK", "a body of 2 bytes", "not the challenge token"],
        ),
        (&long.url, vec!["200 OK", "a body of 300 bytes"]),
        (&missing.url, vec!["404 Not Found"]),
        (&erroring.url, vec!["500 Internal Server Error"]),
        (&slow.url, vec!["timeout: no answer within 300 ms"]),
        (&closed, vec!["connect"]),
    ];
    for (url, fragments) in &cases {
        let started = Instant::now();
        let (status, error) = s
            .api
            .call(
                "POST",
                "/v1/endpoints",
                Some(json!({"url": url, "timeout_ms": 300})),
            )
            .await;
        assert_eq!(status, 422, "{url}: {error}");
        assert_eq!(error["error"], "challenge_failed", "{url}: {error}");
        let message = error["message"].as_str().unwrap();
        for fragment in fragments {
            assert!(message.contains(fragment), "{url}: {message}");
        }
        assert!(message.contains("skip_challenge"), "{message}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the endpoint's timeout bounds the challenge"
        );
    }
    // The answer is never quoted: the challenge must not read other services for the caller.
    for url in [&wrong.url, &long.url] {
        let (_, error) = s
            .api
            .call("POST", "/v1/endpoints", Some(json!({"url": url})))
            .await;
        let message = error["message"].as_str().unwrap();
        assert!(
            !message.contains("\"ok\"") && !message.contains("aaaa"),
            "{message}"
        );
    }
    assert_eq!(endpoint_count(&s).await, 0, "nothing is stored");
    let event = s.api.emit("payment.succeeded", json!({})).await;
    assert!(s.api.deliveries_of(&event).await.is_empty());

    // Invalid input is refused before any connection.
    let (status, _) = s
        .api
        .call(
            "POST",
            "/v1/endpoints",
            Some(json!({"url": missing.url, "event_types": []})),
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(missing.requests().len(), 1);

    // `skip_challenge` registers without a request.
    create(&s, json!({"url": missing.url, "skip_challenge": true})).await;
    assert_eq!(missing.requests().len(), 1);
    s.server.shutdown().await;
}

// ---- PATCH ----

#[tokio::test]
async fn patch_changes_each_field_with_the_validation_of_creation() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let created = endpoint_of(&s, &id).await;
    assert_eq!(created["api_version"], Value::Null);
    assert_eq!(created["rate_limit_per_second"], Value::Null);
    assert_eq!(created["status"], "active");

    for (change, field, value) in [
        (
            json!({"description": "orders"}),
            "description",
            json!("orders"),
        ),
        (
            json!({"event_types": ["refund.*", "payment.failed"]}),
            "event_types",
            json!(["refund.*", "payment.failed"]),
        ),
        (json!({"timeout_ms": 1500}), "timeout_ms", json!(1500)),
        (
            json!({"api_version": "2026-12-01"}),
            "api_version",
            json!("2026-12-01"),
        ),
        (
            json!({"rate_limit_per_second": 50}),
            "rate_limit_per_second",
            json!(50),
        ),
    ] {
        let (status, patched) = patch(&s, &id, change.clone()).await;
        assert_eq!(status, 200, "{change}: {patched}");
        assert_eq!(patched[field], value, "{change}: {patched}");
        assert!(patched.get("secret").is_none());
        let got = endpoint_of(&s, &id).await;
        assert_eq!(got[field], value, "{change}: {got}");
    }
    let before = endpoint_of(&s, &id).await;
    assert_eq!(before["description"], "orders", "earlier changes are kept");

    let long = "x".repeat(513);
    for (change, code, fragment) in [
        (
            json!({"url": "ftp://x.example/"}),
            "invalid_request",
            "scheme",
        ),
        (json!({"url": "not a url"}), "invalid_request", "url"),
        (
            json!({"url": "http://10.0.0.1/x"}),
            "blocked_address",
            "private",
        ),
        (
            json!({"url": "http://user:pw@x.example/"}),
            "invalid_request",
            "credentials",
        ),
        (json!({"event_types": []}), "invalid_request", "event_types"),
        (
            json!({"event_types": ["a b"]}),
            "invalid_request",
            "event type",
        ),
        (
            json!({"description": long}),
            "invalid_request",
            "description",
        ),
        (json!({"timeout_ms": 50}), "invalid_request", "timeout_ms"),
        (
            json!({"timeout_ms": 60000}),
            "invalid_request",
            "timeout_ms",
        ),
        (
            json!({"api_version": "a b"}),
            "invalid_request",
            "api_version",
        ),
        (json!({"api_version": ""}), "invalid_request", "api_version"),
        (
            json!({"rate_limit_per_second": 0}),
            "invalid_request",
            "rate_limit_per_second",
        ),
        (
            json!({"rate_limit_per_second": 10001}),
            "invalid_request",
            "rate_limit_per_second",
        ),
        (json!({"url": null}), "invalid_request", "null"),
        (json!({"description": null}), "invalid_request", "null"),
        (json!({"status": "paused"}), "invalid_request", "status"),
        (json!({"secret": "x"}), "invalid_request", "secret"),
    ] {
        let (status, error) = patch(&s, &id, change.clone()).await;
        assert_eq!(status, 422, "{change}: {error}");
        assert_eq!(error["error"], code, "{change}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(fragment),
            "{change}: {error}"
        );
    }
    // Nothing of a refused request was applied, and `{}` changes nothing either.
    let same = patched(&s, &id, json!({})).await;
    assert_eq!(same, before);
    let after = endpoint_of(&s, &id).await;
    assert_eq!(after, before);

    // null clears the two nullable settings.
    let cleared = patched(
        &s,
        &id,
        json!({"api_version": null, "rate_limit_per_second": null}),
    )
    .await;
    assert_eq!(cleared["api_version"], Value::Null);
    assert_eq!(cleared["rate_limit_per_second"], Value::Null);
    assert_eq!(cleared["timeout_ms"], 1500);

    // Creation takes and checks them too.
    let created = create(
        &s,
        json!({"url": receiver.url, "skip_challenge": true,
               "api_version": "2026-11-01", "rate_limit_per_second": 10000}),
    )
    .await
    .endpoint;
    assert_eq!(created.api_version.as_deref(), Some("2026-11-01"));
    assert_eq!(created.rate_limit_per_second, Some(10000));
    let (status, _) = s
        .api
        .call(
            "POST",
            "/v1/endpoints",
            Some(json!({"url": receiver.url, "skip_challenge": true, "rate_limit_per_second": -1})),
        )
        .await;
    assert_eq!(status, 422);

    let (status, _) = patch(&s, "ep_nope", json!({"description": "x"})).await;
    assert_eq!(status, 404);
    s.server.shutdown().await;
}

#[tokio::test]
async fn new_event_types_apply_to_the_next_events() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    patched(&s, &id, json!({"event_types": ["refund.*"]})).await;
    let payment = s.api.emit("payment.succeeded", json!({})).await;
    let refund = s.api.emit("refund.created", json!({})).await;
    assert!(s.api.deliveries_of(&payment).await.is_empty());
    s.api.wait_for(&refund, "delivered", SECS_10).await;
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_new_url_is_challenged_and_pending_deliveries_follow_it() {
    let s = sender("0s").await;
    let old = Receiver::start(vec![]).await;
    let (id, secret) = s.api.endpoint(&old.url, json!({})).await;

    // A URL that fails the challenge is refused, and the old one stays.
    let failing = Challenged::start(Answer::Status(404)).await;
    let (status, error) = patch(&s, &id, json!({"url": failing.url})).await;
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"], "challenge_failed");
    assert_eq!(failing.requests().len(), 1);
    let endpoint = endpoint_of(&s, &id).await;
    assert_eq!(endpoint["url"], old.url.as_str());

    // One that passes is taken; the same URL again is not challenged.
    let (passing, requests) = kxp_axum_receiver().await;
    let answer = patched(&s, &id, json!({"url": passing})).await;
    assert_eq!(answer["url"], passing.as_str());
    patched(&s, &id, json!({"url": passing, "description": "d"})).await;
    assert_eq!(requests.lock().unwrap().len(), 1);

    // Deliveries held while the URL changes go to the new one.
    pause(&s, &id).await;
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let new = Receiver::start(vec![]).await;
    patched(
        &s,
        &id,
        json!({"url": new.url, "skip_challenge": true, "timeout_ms": 2000}),
    )
    .await;
    resume(&s, &id).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    assert!(old.seen().is_empty());
    assert_eq!(new.seen().len(), 1);
    assert!(crate::support::verifies(&new.seen()[0], &secret));
    s.server.shutdown().await;
}

// ---- pause and resume ----

each_backend!(pause_holds_deliveries_and_resume_delivers_them);

async fn pause_holds_deliveries_and_resume_delivers_them(database: Database) {
    let s = database.sender("0s,2s").await;
    // A delivery waiting for its retry when the endpoint is paused is held too.
    let receiver = Receiver::start(vec![Reply::Status(500)]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let retried = s.api.emit("payment.succeeded", json!({"n": 0})).await;
    wait_attempts(&s, &retried, &id, 1).await;

    let paused = pause(&s, &id).await;
    assert_eq!(paused["status"], "paused");
    let again = pause(&s, &id).await;
    assert_eq!(again["status"], "paused");
    let listed = list_endpoints(&s).await;
    assert_eq!(listed[0]["status"], "paused");

    // New events still queue deliveries for it: nothing is lost while it rests.
    let mut events = vec![retried.clone()];
    for n in 1..=3 {
        events.push(s.api.emit("payment.succeeded", json!({"n": n})).await);
    }
    // Past the retry's due time, and time enough for any worker to have claimed.
    tokio::time::sleep(Duration::from_millis(2300)).await;
    assert_eq!(receiver.seen().len(), 1, "nothing is sent while paused");
    for (n, event) in events.iter().enumerate() {
        let deliveries = s.api.deliveries_of(event).await;
        assert_eq!(deliveries.len(), 1, "{deliveries:?}");
        let d = &deliveries[0];
        assert_eq!(d["status"], "pending", "{d}");
        assert_eq!(d["attempts"], if n == 0 { 1 } else { 0 }, "{d}");
        assert_eq!(d["next_attempt_at"], Value::Null, "held: no time: {d}");
    }

    let resumed = resume(&s, &id).await;
    assert_eq!(resumed["status"], "active");
    for event in &events {
        s.api.wait_for(event, "delivered", SECS_10).await;
    }
    let attempts: Vec<i64> = {
        let mut attempts = Vec::new();
        for event in &events {
            attempts.push(
                s.api.deliveries_of(event).await[0]["attempts"]
                    .as_i64()
                    .unwrap(),
            );
        }
        attempts
    };
    assert_eq!(attempts, [2, 1, 1, 1], "the pause burnt no attempt");
    assert_eq!(receiver.seen().len(), 5);

    // Resuming an active endpoint is a no-op; unknown ids are 404.
    resume(&s, &id).await;
    for path in [
        "/v1/endpoints/ep_nope/pause",
        "/v1/endpoints/ep_nope/resume",
    ] {
        assert_eq!(post_to(&s, path).await.0, 404, "{path}");
    }
    s.server.shutdown().await;
}

/// Waits until the event's delivery to `endpoint` is pending after `attempts` tries.
async fn wait_attempts(s: &Sender, event: &str, endpoint: &str, attempts: i64) {
    let start = Instant::now();
    loop {
        let deliveries = s.api.deliveries_of(event).await;
        if deliveries.iter().any(|d| {
            d["endpoint_id"] == endpoint && d["attempts"] == attempts && d["status"] == "pending"
        }) {
            return;
        }
        assert!(start.elapsed() < SECS_10, "{deliveries:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- delete ----

each_backend!(delete_ends_pending_deliveries_visibly_and_queues_no_more);
on_citus!(
    pause_holds_deliveries_and_resume_delivers_them,
    delete_ends_pending_deliveries_visibly_and_queues_no_more
);

async fn delete_ends_pending_deliveries_visibly_and_queues_no_more(database: Database) {
    let s = database.sender("0s,1m").await;
    // One delivery failed once and waits a minute for its retry; two are held by a pause.
    let receiver = Receiver::start(vec![Reply::Status(500)]).await;
    let other = Receiver::start(vec![]).await;
    let (id, _) = s
        .api
        .endpoint(&receiver.url, json!({"event_types": ["payment.*"]}))
        .await;
    s.api
        .endpoint(&other.url, json!({"event_types": ["*"]}))
        .await;
    let retrying = s.api.emit("payment.failed", json!({})).await;
    wait_attempts(&s, &retrying, &id, 1).await;
    pause(&s, &id).await;
    let held = [
        s.api.emit("payment.succeeded", json!({"n": 1})).await,
        s.api.emit("payment.succeeded", json!({"n": 2})).await,
    ];

    let deleted = s.api.client.delete_endpoint(&id.as_str().into()).await;
    assert_eq!(
        value(&deleted.unwrap()),
        json!({"id": id, "status": "deleted", "dead_deliveries": 3})
    );

    // Gone from the endpoint routes...
    assert_eq!(get_endpoint(&s, &id).await.0, 404);
    let listed = list_endpoints(&s).await;
    assert!(listed.iter().all(|e| e["id"] != id.as_str()), "{listed:?}");
    for (method, path, body) in [
        ("DELETE", format!("/v1/endpoints/{id}"), None),
        (
            "PATCH",
            format!("/v1/endpoints/{id}"),
            Some(json!({"description": "x"})),
        ),
        ("POST", format!("/v1/endpoints/{id}/pause"), None),
        ("POST", format!("/v1/endpoints/{id}/resume"), None),
        ("POST", format!("/v1/endpoints/{id}/rotate-secret"), None),
        ("POST", format!("/v1/endpoints/{id}/replay"), None),
    ] {
        let (status, answer) = s.api.call(method, &path, body).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
    }

    // ...but every event it was owed is visible: dead, with the reason, in the dead-letter queue.
    let mut dead_ids = Vec::new();
    for (event, attempts) in [(&retrying, 1), (&held[0], 0), (&held[1], 0)] {
        let deliveries = s.api.deliveries_of(event).await;
        let d = deliveries
            .iter()
            .find(|d| d["endpoint_id"] == id.as_str())
            .unwrap();
        assert_eq!(d["status"], "dead", "{d}");
        assert_eq!(d["last_error"], "endpoint_deleted", "{d}");
        assert_eq!(d["attempts"], attempts, "{d}");
        dead_ids.push(d["id"].as_str().unwrap().to_owned());
    }
    let dlq = s
        .api
        .client
        .deliveries(&typed(json!({"status": "dead", "endpoint_id": id})))
        .await
        .unwrap();
    let listed: Vec<&str> = dlq.data.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(listed, dead_ids);

    // A replay has nowhere to go, and says so.
    let (status, refused) = s
        .api
        .call(
            "POST",
            &format!("/v1/deliveries/{}/replay", dead_ids[0]),
            None,
        )
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"], "endpoint_deleted");

    // New events queue nothing for it; other endpoints are untouched.
    let later = s.api.emit("payment.succeeded", json!({"n": 3})).await;
    let deliveries = s.api.deliveries_of(&later).await;
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_ne!(deliveries[0]["endpoint_id"], id.as_str());
    let start = Instant::now();
    while other.seen().len() < 4 {
        assert!(start.elapsed() < SECS_10, "{:?}", other.seen().len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(other.seen().len(), 4);
    assert_eq!(receiver.seen().len(), 1, "only the attempt before deletion");
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_attempt_in_flight_when_its_endpoint_is_deleted_ends_dead_not_retried() {
    let s = sender("0s,10ms,20ms").await;
    let receiver = Receiver::start(vec![Reply::Hang(Duration::from_secs(3))]).await;
    let (id, _) = s
        .api
        .endpoint(&receiver.url, json!({"timeout_ms": 1000}))
        .await;
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let start = Instant::now();
    while receiver.seen().is_empty() {
        assert!(start.elapsed() < SECS_10);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let deleted = s
        .api
        .client
        .delete_endpoint(&id.as_str().into())
        .await
        .unwrap();
    assert_eq!(
        deleted.dead_deliveries, 0,
        "it was in flight, not pending: {deleted:?}"
    );
    let dead = s.api.wait_for(&event, "dead", SECS_10).await;
    assert_eq!(dead["last_error"], "endpoint_deleted", "{dead}");
    assert_eq!(dead["attempts"], 1, "{dead}");
    let attempts = s.api.attempts(dead["id"].as_str().unwrap()).await;
    assert!(
        attempts[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("timeout"),
        "the attempt itself is recorded as it went: {attempts:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(receiver.seen().len(), 1, "no retry after the deletion");
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_attempt_in_flight_when_its_endpoint_is_paused_retries_only_after_the_resume() {
    let s = sender("0s,10ms,20ms").await;
    let receiver = Receiver::start(vec![Reply::Hang(Duration::from_secs(3))]).await;
    let (id, _) = s
        .api
        .endpoint(&receiver.url, json!({"timeout_ms": 1000}))
        .await;
    let event = s.api.emit("payment.succeeded", json!({})).await;
    let start = Instant::now();
    while receiver.seen().is_empty() {
        assert!(start.elapsed() < SECS_10);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    pause(&s, &id).await;
    // The attempt times out, and its retry (due 10 ms later) waits for the resume.
    wait_attempts(&s, &event, &id, 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.seen().len(), 1);
    let held = s.api.deliveries_of(&event).await;
    assert_eq!(
        (&held[0]["status"], &held[0]["attempts"]),
        (&json!("pending"), &json!(1))
    );

    resume(&s, &id).await;
    let delivered = s.api.wait_for(&event, "delivered", SECS_10).await;
    assert_eq!(delivered["attempts"], 2);
    s.server.shutdown().await;
}
