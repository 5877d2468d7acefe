//! The client against a loopback server (127.0.0.1, real HTTP): what it sends (method, path,
//! query, headers, body) and how it reads answers, errors included.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use kxp_api::*;
use serde_json::{Value, json};

/// One request the server saw.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

type Reply = (u16, Vec<(&'static str, String)>, String);

#[derive(Clone, Default)]
struct Script {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// A server answering `replies` in order; and a client of it with the key `kxp_test_key`.
async fn server(replies: Vec<Reply>) -> (Client, Script) {
    let script = Script {
        replies: Arc::new(Mutex::new(replies.into())),
        ..Script::default()
    };
    let app = Router::new().fallback(answer).with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::new(&base, "kxp_test_key").unwrap();
    (client, script)
}

async fn answer(
    State(script): State<Script>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    script.seen.lock().unwrap().push(Seen {
        method,
        uri: uri.to_string(),
        headers,
        body,
    });
    let (status, headers, body) = script
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .expect("a reply for every request");
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    for (name, value) in headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

fn ok(status: u16, body: Value) -> Reply {
    (status, vec![], body.to_string())
}

fn endpoint_json(id: &str) -> Value {
    json!({
        "id": id, "url": "https://merchant.example/hook", "description": "",
        "event_types": ["*"], "timeout_ms": 5000, "status": "active", "api_version": null,
        "rate_limit_per_second": null, "circuit_state": "closed", "signing": "hmac",
        "created_at": "2026-11-30T01:02:03Z", "updated_at": "2026-11-30T01:02:03Z"
    })
}

fn delivery_json(id: &str) -> Value {
    json!({
        "id": id, "event_id": "e1", "endpoint_id": "ep_1", "status": "dead", "attempts": 8,
        "next_attempt_at": null, "last_status": 503, "last_error": "http_503",
        "replayed_by": null, "created_at": "2026-11-30T01:02:03Z",
        "updated_at": "2026-11-30T01:02:03Z"
    })
}

#[tokio::test]
async fn create_endpoint_sends_the_key_and_the_body() {
    let mut created = endpoint_json("ep_1");
    created["secret"] = json!("ab".repeat(32));
    let (client, script) = server(vec![ok(201, created)]).await;
    let mut new = NewEndpoint::new("https://merchant.example/hook");
    new.skip_challenge = true;
    let created = client.create_endpoint(&new).await.unwrap();
    assert_eq!(created.endpoint.id, "ep_1");
    assert_eq!(created.secret.as_ref().unwrap().expose(), "ab".repeat(32));

    let seen = script.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.uri, "/v1/endpoints");
    assert_eq!(seen.header("authorization"), Some("Bearer kxp_test_key"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(
        seen.json(),
        json!({"url": "https://merchant.example/hook", "skip_challenge": true})
    );
}

#[tokio::test]
async fn every_route_has_its_method_and_path() {
    let ep = EndpointId::from("ep_1");
    let dlv = DeliveryId::from("dlv_1");
    let evt = EventId::from("e1");
    let event = json!({"id": "e1", "type": "t", "api_version": "v", "created_at": "2026-11-30T01:02:03Z", "data": {}});
    let schema = json!({"id": "sch_1", "type": "t", "api_version": "v", "schema": {}, "created_at": "2026-11-30T01:02:03Z", "updated_at": "2026-11-30T01:02:03Z"});
    let account = json!({"id": "acc_1", "name": "n", "default_api_version": "v", "ops_url": null, "contact_email": null});
    let empty = json!({"data": [], "next_cursor": null});
    let (client, script) = server(vec![
        ok(200, json!({"data": [endpoint_json("ep_1")], "next_cursor": null})),
        ok(200, {
            let mut details = endpoint_json("ep_1");
            details["secrets"] = json!([{"fingerprint": "af17edef1cfa9c63",
                "created_at": "2026-11-30T01:02:03Z", "expires_at": null, "last_verified_at": null}]);
            details["rotation"] = json!(null);
            details
        }),
        ok(200, endpoint_json("ep_1")),
        ok(200, json!({"id": "ep_1", "status": "deleted", "dead_deliveries": 0})),
        ok(200, endpoint_json("ep_1")),
        ok(200, endpoint_json("ep_1")),
        ok(200, json!({"secret": "s", "previous_expires_at": "2026-12-01T10:00:00Z"})),
        ok(200, json!({"endpoint_id": "ep_1",
            "last_1h": {"attempts": 0, "successes": 0, "failures": 0, "success_rate": null, "latency_p50_ms": null, "latency_p95_ms": null},
            "last_24h": {"attempts": 0, "successes": 0, "failures": 0, "success_rate": null, "latency_p50_ms": null, "latency_p95_ms": null},
            "consecutive_failures": 0, "last_success_at": null, "last_failure_at": null, "last_error": null,
            "pending": 0, "due": 0, "oldest_due_at": null, "dead": 0, "status": "active", "circuit_state": "closed",
            "circuit_opened_at": null, "next_probe_at": null, "failing_since": null})),
        ok(202, json!({"queued": 2})),
        ok(200, event.clone()),
        ok(200, empty.clone()),
        ok(200, empty.clone()),
        ok(202, delivery_json("dlv_2")),
        ok(200, account.clone()),
        ok(200, account),
        ok(200, empty.clone()),
        ok(200, empty),
        ok(201, schema.clone()),
        ok(200, schema.clone()),
        ok(200, schema),
        ok(200, json!({"deleted": true, "type": "t", "api_version": "v"})),
        ok(200, json!({"status": "ok", "database": "sqlite"})),
        (200, vec![("content-type", "text/plain; version=0.0.4".into())], "kxp_events_total 3\n".into()),
    ])
    .await;

    client.list_endpoints(&PageQuery::limit(10)).await.unwrap();
    client.endpoint(&ep).await.unwrap();
    let mut patch = EndpointPatch::default();
    patch.api_version = Patch::Clear;
    client.update_endpoint(&ep, &patch).await.unwrap();
    client.delete_endpoint(&ep).await.unwrap();
    client.pause_endpoint(&ep).await.unwrap();
    client.resume_endpoint(&ep).await.unwrap();
    client
        .rotate_secret(&ep, &RotateSecret::overlap("0s"))
        .await
        .unwrap();
    client.endpoint_health(&ep).await.unwrap();
    let queued = client
        .replay_endpoint(&ep, &BulkReplay::status(DeliveryStatus::Dead))
        .await
        .unwrap();
    assert_eq!(queued.queued, 2);
    client.event(&evt).await.unwrap();
    client.event_deliveries(&evt).await.unwrap();
    client.delivery_attempts(&dlv).await.unwrap();
    let replayed = client.replay_delivery(&dlv).await.unwrap();
    assert_eq!(replayed.id, "dlv_2");
    client.account().await.unwrap();
    let mut account_patch = AccountPatch::default();
    account_patch.contact_email = Patch::Clear;
    client.update_account(&account_patch).await.unwrap();
    client.notifications(&PageQuery::default()).await.unwrap();
    client.schemas().await.unwrap();
    let (_, created) = client
        .put_schema("t", "v", &json!({"type": "object"}))
        .await
        .unwrap();
    assert!(created);
    let (_, created) = client.put_schema("t", "v", &json!(true)).await.unwrap();
    assert!(!created);
    client.schema("t", "v").await.unwrap();
    client.delete_schema("t", "v").await.unwrap();
    assert_eq!(client.healthz().await.unwrap().database, "sqlite");
    assert_eq!(client.metrics().await.unwrap(), "kxp_events_total 3\n");

    let seen: Vec<(String, String)> = script
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.method.to_string(), s.uri.clone()))
        .collect();
    let expected = [
        ("GET", "/v1/endpoints?limit=10"),
        ("GET", "/v1/endpoints/ep_1"),
        ("PATCH", "/v1/endpoints/ep_1"),
        ("DELETE", "/v1/endpoints/ep_1"),
        ("POST", "/v1/endpoints/ep_1/pause"),
        ("POST", "/v1/endpoints/ep_1/resume"),
        ("POST", "/v1/endpoints/ep_1/rotate-secret"),
        ("GET", "/v1/endpoints/ep_1/health"),
        ("POST", "/v1/endpoints/ep_1/replay"),
        ("GET", "/v1/events/e1"),
        ("GET", "/v1/events/e1/deliveries"),
        ("GET", "/v1/deliveries/dlv_1/attempts"),
        ("POST", "/v1/deliveries/dlv_1/replay"),
        ("GET", "/v1/account"),
        ("PATCH", "/v1/account"),
        ("GET", "/v1/notifications"),
        ("GET", "/v1/schemas"),
        ("PUT", "/v1/schemas/t/v"),
        ("PUT", "/v1/schemas/t/v"),
        ("GET", "/v1/schemas/t/v"),
        ("DELETE", "/v1/schemas/t/v"),
        ("GET", "/healthz"),
        ("GET", "/metrics"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(seen, expected);
    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen[2].json(), json!({"api_version": null}));
    assert_eq!(seen[6].json(), json!({"overlap": "0s"}));
    assert_eq!(seen[8].json(), json!({"status": "dead"}));
    assert_eq!(seen[14].json(), json!({"contact_email": null}));
    assert_eq!(seen[17].json(), json!({"type": "object"}));
    assert!(
        seen.iter()
            .all(|s| s.header("authorization") == Some("Bearer kxp_test_key"))
    );
}

#[tokio::test]
async fn create_event_sends_the_idempotency_key_and_keeps_data() {
    let envelope = r#"{"id":"e1","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{"amount":4200.50}}"#;
    let (client, script) = server(vec![
        (202, vec![], envelope.into()),
        (202, vec![], envelope.into()),
    ])
    .await;
    let new = NewEvent::raw(
        "payment.succeeded",
        RawJson::from_string(r#"{"amount":4200.50}"#.into()).unwrap(),
    );
    let event = client.create_event(&new, Some("order-42")).await.unwrap();
    assert_eq!(event.data.get(), r#"{"amount":4200.50}"#);
    client.create_event(&new, None).await.unwrap();
    let seen = script.seen.lock().unwrap().clone();
    assert_eq!(seen[0].header("idempotency-key"), Some("order-42"));
    assert_eq!(seen[1].header("idempotency-key"), None);
    assert_eq!(
        std::str::from_utf8(&seen[0].body).unwrap(),
        r#"{"type":"payment.succeeded","data":{"amount":4200.50}}"#
    );
}

#[tokio::test]
async fn errors_are_decoded_known_unknown_and_not_json() {
    let (client, _) = server(vec![
        ok(
            404,
            json!({"error": "not_found", "message": "no such resource"}),
        ),
        (
            503,
            vec![("retry-after", "7".into())],
            json!({"error": "store_unavailable", "message": "retry"}).to_string(),
        ),
        ok(
            429,
            json!({"error": "quota_exceeded", "message": "slow down"}),
        ),
        ok(
            400,
            json!({"error": "schema_violation", "message": "m", "path": "/amount"}),
        ),
        (405, vec![], String::new()),
        ok(200, json!({"unexpected": true})),
    ])
    .await;
    let ep = EndpointId::from("ep_x");

    match client.endpoint(&ep).await.unwrap_err() {
        ClientError::Api {
            status,
            code,
            message,
            retry_after,
            ..
        } => {
            assert_eq!(
                (status, code, message.as_str()),
                (404, ErrorCode::NotFound, "no such resource")
            );
            assert_eq!(retry_after, None);
        }
        other => panic!("{other:?}"),
    }
    let unavailable = client.endpoint(&ep).await.unwrap_err();
    assert!(matches!(
        &unavailable,
        ClientError::Api { code: ErrorCode::StoreUnavailable, retry_after: Some(d), .. } if *d == Duration::from_secs(7)
    ));
    assert_eq!(unavailable.to_string(), "503 store_unavailable: retry");
    let unknown = client.endpoint(&ep).await.unwrap_err();
    assert_eq!(
        unknown.code(),
        Some(&ErrorCode::Unknown("quota_exceeded".into()))
    );
    assert_eq!(unknown.status(), Some(429));
    let violation = client.endpoint(&ep).await.unwrap_err();
    assert!(matches!(violation, ClientError::Api { path: Some(ref p), .. } if p == "/amount"));
    let empty = client.endpoint(&ep).await.unwrap_err();
    assert!(
        matches!(empty, ClientError::Decode { status: 405, .. }),
        "{empty:?}"
    );
    assert!(std::error::Error::source(&empty).is_some());
    let shape = client.endpoint(&ep).await.unwrap_err();
    assert!(
        matches!(&shape, ClientError::Decode { status: 200, body, .. } if body.contains("unexpected"))
    );
}

#[tokio::test]
async fn pagination_follows_next_cursor() {
    let (client, script) = server(vec![
        ok(200, json!({"data": [delivery_json("dlv_1"), delivery_json("dlv_2")], "next_cursor": "dlv_2"})),
        ok(200, json!({"data": [delivery_json("dlv_3")], "next_cursor": "dlv_3"})),
        ok(200, json!({"data": [], "next_cursor": null})),
    ])
    .await;
    let query = DeliveryQuery::dead()
        .endpoint(EndpointId::from("ep_1"))
        .limit(2);
    let all = client.all_deliveries(&query).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["dlv_1", "dlv_2", "dlv_3"]);
    let uris: Vec<String> = script
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.uri.clone())
        .collect();
    assert_eq!(
        uris,
        [
            "/v1/deliveries?status=dead&endpoint_id=ep_1&limit=2",
            "/v1/deliveries?status=dead&endpoint_id=ep_1&cursor=dlv_2&limit=2",
            "/v1/deliveries?status=dead&endpoint_id=ep_1&cursor=dlv_3&limit=2",
        ]
    );
}

#[tokio::test]
async fn ids_are_one_path_segment_and_the_key_is_never_printed() {
    let (client, script) =
        server(vec![ok(404, json!({"error": "not_found", "message": "m"}))]).await;
    let odd = EndpointId::from("a/b?c");
    let _ = client.endpoint(&odd).await;
    assert_eq!(
        script.seen.lock().unwrap()[0].uri,
        "/v1/endpoints/a%2Fb%3Fc"
    );
    assert!(!format!("{client:?}").contains("kxp_test_key"));
    assert!(format!("{client:?}").contains("[redacted]"));
    assert!(matches!(
        Client::new("not a url", "k"),
        Err(ClientError::BaseUrl(_))
    ));
    assert!(matches!(
        Client::new("mailto:a@b", "k"),
        Err(ClientError::BaseUrl(_))
    ));
}
