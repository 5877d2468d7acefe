//! Every `/v1` route is scoped to the caller's account, checked route by route from one table.
//!
//! [`ROUTES`] lists every route `api::app` registers (a guard test reads the router's source
//! and fails when a route is missing from the table, or the table names one that is gone).
//! For each row, on one server with two accounts A and B:
//!
//! - no key, a wrong key, A's key hash, a non-Bearer scheme → 401 `{"error":"unauthorized"}`;
//! - B's key on A's ids → 404, the same answer as for an id that does not exist; B's lists hold
//!   only B's objects, and a filter naming A's endpoint is empty; what B creates is B's;
//! - nothing of the above changed a byte of A's rows, or any answer A gets;
//! - A's key → success, and A's lists hold none of B's objects;
//! - A's key naming B in `X-Kxp-Account` (and B's naming A) → 404 on every row, before
//!   anything is read or written: an account key never acts for another account;
//! - every account key on the operator routes ([`OPERATOR`]) → 401;
//! - A's listen token → 403 `forbidden` on every row but [`LISTEN_ROUTES`], where A's push
//!   endpoints answer 404 and a push endpoint's creation 403; 403 on the operator routes; 401
//!   on the feed's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kxp_sender::Db;
use serde_json::{Value, json};
use sqlx::SqlitePool;

use crate::support::{Api, Receiver, Reply, sender};

use AsOther::{CreatesOwn, Empty, NotFound, OnlyOwn, OwnAccount, OwnCopy, OwnLink, OwnToken};
use Target::{
    DeadDelivery, DeliveredDelivery, Endpoint, Erasure, Event, NoId, Schema, SpareEndpoint,
};

/// Which of A's objects fills `{id}` in a row's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The path has no `{id}`.
    NoId,
    /// A's endpoint, which has deliveries.
    Endpoint,
    /// A's second endpoint, with no deliveries: for routes that destroy an endpoint, so the
    /// other rows keep theirs.
    SpareEndpoint,
    /// A's event whose delivery is dead.
    Event,
    /// A's dead delivery (with a failed attempt).
    DeadDelivery,
    /// A's delivered delivery (with a successful attempt).
    DeliveredDelivery,
    /// A's schema: `{type}/{api_version}` in the path.
    Schema,
    /// A's erasure (of a tag no event carries).
    Erasure,
}

/// What B, another account, must get from a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AsOther {
    /// 404 `not_found`, the same answer as for an id that does not exist.
    NotFound,
    /// 200 with a list holding only B's own objects, and at least one (so it is no vacuous
    /// pass), none of A's.
    OnlyOwn,
    /// 200 with an empty list (the query names one of A's objects).
    Empty,
    /// This status, with a new object of B's own (readable at `GET <path>/<id>`): not one of
    /// A's, visible to B, 404 to A.
    CreatesOwn(u16),
    /// This status, with an object of B's own under the same name as A's (names are per
    /// account): A's stays as it was, which the checks of A's rows and answers below prove.
    OwnCopy(u16),
    /// 200 with B's own account (the route addresses the caller's account).
    OwnAccount,
    /// This status, with a portal link whose token signs in to B's account (its stored row
    /// names B), never A's.
    OwnLink(u16),
    /// This status, with a listen token of B's account (its stored row names B), never A's.
    OwnToken(u16),
}

/// One call of the table: a route of `api::app` with ids, query, body and headers filled in.
#[derive(Debug)]
struct Route {
    /// `METHOD /path`, the path exactly as registered in `api::app`.
    route: &'static str,
    /// Appended to the path; `{endpoint}` becomes A's endpoint id.
    query: &'static str,
    /// Which of A's objects fills `{id}`.
    target: Target,
    /// A JSON body; `{url}` becomes the caller's receiver URL.
    body: Option<&'static str>,
    headers: &'static [(&'static str, &'static str)],
    other: AsOther,
    /// A's own status for the call.
    owner: u16,
}

const fn row(route: &'static str, target: Target, other: AsOther, owner: u16) -> Route {
    Route {
        route,
        query: "",
        target,
        body: None,
        headers: &[],
        other,
        owner,
    }
}

impl Route {
    fn method(&self) -> &'static str {
        self.route.split_once(' ').unwrap().0
    }

    fn path(&self) -> &'static str {
        self.route.split_once(' ').unwrap().1
    }

    const fn query(self, query: &'static str) -> Route {
        Route { query, ..self }
    }

    const fn body(self, body: &'static str) -> Route {
        Route {
            body: Some(body),
            ..self
        }
    }

    const fn headers(self, headers: &'static [(&'static str, &'static str)]) -> Route {
        Route { headers, ..self }
    }
}

/// A's first event is created with this body and key; B posts the very same ones.
const SHARED_EVENT: &str = r#"{"type":"payment.failed","data":{"order":1}}"#;
const SHARED_KEY: &[(&str, &str)] = &[("idempotency-key", "order-1")];

/// Every `/v1` route of `api::app`; a route may have several rows (query or body variants).
/// One row a line: a table (rustfmt would break long rows over five lines each).
#[rustfmt::skip]
const ROUTES: &[Route] = &[
    row("POST /v1/endpoints", NoId, CreatesOwn(201), 201).body(r#"{"url":"{url}","skip_challenge":true}"#),
    row("GET /v1/endpoints", NoId, OnlyOwn, 200),
    row("GET /v1/endpoints/{id}", Endpoint, NotFound, 200),
    row("GET /v1/endpoints/{id}", SpareEndpoint, NotFound, 200),
    row("PATCH /v1/endpoints/{id}", Endpoint, NotFound, 200).body(r#"{"description":"mine now"}"#),
    // B points A's endpoint at B's own receiver: the takeover that must not happen.
    row("PATCH /v1/endpoints/{id}", Endpoint, NotFound, 200).body(r#"{"url":"{url}","skip_challenge":true}"#),
    row("DELETE /v1/endpoints/{id}", SpareEndpoint, NotFound, 200),
    row("POST /v1/endpoints/{id}/pause", Endpoint, NotFound, 200),
    row("POST /v1/endpoints/{id}/resume", Endpoint, NotFound, 200),
    row("POST /v1/endpoints/{id}/rotate-secret", Endpoint, NotFound, 200),
    row("POST /v1/endpoints/{id}/rotate-secret", Endpoint, NotFound, 200).body(r#"{"overlap":"0s"}"#),
    row("GET /v1/endpoints/{id}/health", Endpoint, NotFound, 200),
    row("GET /v1/endpoints/{id}/public-key", Endpoint, NotFound, 200),
    row("POST /v1/endpoints/{id}/feed-token", Endpoint, NotFound, 201),
    row("POST /v1/endpoints/{id}/replay", Endpoint, NotFound, 202),
    row("POST /v1/endpoints/{id}/replay", Endpoint, NotFound, 202).body(r#"{"status":"delivered"}"#),
    row("POST /v1/endpoints/{id}/test-filter", Endpoint, NotFound, 200),
    row("POST /v1/endpoints/{id}/test-filter", Endpoint, NotFound, 200).body(r#"{"filter":{"tags":"x"},"limit":5}"#),
    // The same Idempotency-Key and body as A's event: B gets an event of its own, never A's.
    row("POST /v1/events", NoId, CreatesOwn(202), 202).body(SHARED_EVENT).headers(SHARED_KEY),
    row("GET /v1/events", NoId, OnlyOwn, 200),
    row("GET /v1/events/{id}", Event, NotFound, 200),
    row("GET /v1/events/{id}/deliveries", Event, NotFound, 200),
    row("GET /v1/deliveries", NoId, OnlyOwn, 200),
    row("GET /v1/deliveries", NoId, OnlyOwn, 200).query("?status=dead"),
    row("GET /v1/deliveries", NoId, Empty, 200).query("?endpoint_id={endpoint}"),
    row("GET /v1/deliveries", NoId, Empty, 200).query("?status=dead&endpoint_id={endpoint}"),
    row("GET /v1/deliveries/{id}/attempts", DeadDelivery, NotFound, 200),
    row("GET /v1/deliveries/{id}/attempts", DeliveredDelivery, NotFound, 200),
    row("POST /v1/deliveries/{id}/replay", DeadDelivery, NotFound, 202),
    row("POST /v1/deliveries/{id}/replay", DeliveredDelivery, NotFound, 202),
    // Before B's PUT, which gives B a schema of the same name; A's DELETE, then PUT, makes it anew.
    row("GET /v1/schemas", NoId, OnlyOwn, 200),
    row("GET /v1/schemas/{type}/{api_version}", Schema, NotFound, 200),
    row("DELETE /v1/schemas/{type}/{api_version}", Schema, NotFound, 200),
    row("PUT /v1/schemas/{type}/{api_version}", Schema, OwnCopy(201), 201).body(r#"{"type":"object"}"#),
    row("GET /v1/account", NoId, OwnAccount, 200),
    // B sets its ops URL and address: B's account changes, A's does not.
    row("PATCH /v1/account", NoId, OwnAccount, 200).body(r#"{"name":"renamed","ops_url":"{url}","contact_email":"ops@example.com"}"#),
    row("GET /v1/notifications", NoId, OnlyOwn, 200),
    row("POST /v1/portal-links", NoId, OwnLink(201), 201).body(r#"{"scope":"read"}"#),
    row("POST /v1/listen-tokens", NoId, OwnToken(201), 201).body(r#"{"ttl_seconds":60}"#),
    // A tag no event carries: B's erasure is B's, and erases nothing of A's.
    row("POST /v1/erasures", NoId, CreatesOwn(202), 202).body(r#"{"tag":"order:none"}"#),
    row("GET /v1/erasures/{id}", Erasure, NotFound, 200),
];

/// The routes a listen token reaches (for temporary pull endpoints only; pull.rs makes, reads
/// and deletes one with it).
const LISTEN_ROUTES: &[&str] = &[
    "POST /v1/endpoints",
    "GET /v1/endpoints/{id}",
    "DELETE /v1/endpoints/{id}",
];

/// The operator routes of `api::app`: operator keys only (tests/it/operators.rs runs them with
/// one); every account key is refused with 401.
const OPERATOR: &[&str] = &["GET /v1/accounts", "POST /v1/accounts"];

/// Routes of `api::app` that take no key and show no account's data.
// `/jwks/{id}`: public keys, public by design (ed25519.rs tests it).
const PUBLIC: &[&str] = &[
    "GET /livez",
    "GET /readyz",
    "GET /healthz",
    "GET /metrics",
    OPENAPI,
    "GET /jwks/{id}",
];

/// Routes read with an endpoint's own credential, never an API key (any account's key is 401
/// there): the catch-up feed, which feed.rs tests, and a pull endpoint's cursor, which pull.rs
/// tests.
const ENDPOINT_CREDENTIAL: &[&str] = &[
    "GET /v1/endpoints/{id}/feed",
    "GET /v1/endpoints/{id}/events/{event_id}",
    "GET /v1/endpoints/{id}/cursor",
    "PUT /v1/endpoints/{id}/cursor",
];

/// The API's description: the same document for everyone, so the one `/v1` route without a
/// key.
const OPENAPI: &str = "GET /v1/openapi.json";

// ---- the guard: the table and the router are the same list ----

#[test]
fn the_table_lists_every_route_of_the_api_and_nothing_else() {
    // The reader itself, on a router written the way rustfmt may lay out the next one.
    let sample = r#"
        pub fn app(state: AppState) -> Router {
            Router::new()
                .route("/a", get(list).post(create)) // a comment (with parentheses)
                .route(
                    "/a/{id}",
                    axum::routing::get(get_a)
                        .patch(update_a)
                        .delete(delete_a),
                )
                .with_state(state)
        }
        fn other() { Router::new().route("/not-in-app", get(x)); }
    "#;
    let expected: BTreeSet<(String, String)> = [
        ("GET", "/a"),
        ("POST", "/a"),
        ("GET", "/a/{id}"),
        ("PATCH", "/a/{id}"),
        ("DELETE", "/a/{id}"),
    ]
    .iter()
    .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
    .collect();
    assert_eq!(routes_of_app(sample), expected);

    let registered = routes_of_app(include_str!("../../src/http/mod.rs"));
    let listed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| r.route)
        .chain(PUBLIC.iter().copied())
        .chain(ENDPOINT_CREDENTIAL.iter().copied())
        .chain(OPERATOR.iter().copied())
        .map(|route| {
            let (method, path) = route.split_once(' ').unwrap();
            (method.to_owned(), path.to_owned())
        })
        .collect();
    let missing: Vec<_> = registered.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&registered).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "api::app and the isolation table differ.\n  routes with no row in ROUTES \
         (tests/it/isolation.rs): add a row saying what another account gets: {missing:?}\n  \
         rows naming routes api::app does not register: {gone:?}"
    );
    for route in PUBLIC.iter().filter(|r| **r != OPENAPI) {
        assert!(
            !route.contains(" /v1"),
            "{route}: every /v1 route takes a key, so it belongs in ROUTES"
        );
    }
}

/// The `(METHOD, path)` pairs registered by `pub fn app` in the source of `api.rs`. Fails
/// loudly on router constructs it cannot read (nesting, merging, services, `any`/`on`), so a
/// route cannot slip past it.
fn routes_of_app(source: &str) -> BTreeSet<(String, String)> {
    const METHODS: [&str; 9] = [
        "get", "post", "put", "patch", "delete", "head", "options", "trace", "connect",
    ];
    const UNREADABLE: [&str; 10] = [
        "nest",
        "nest_service",
        "merge",
        "route_service",
        "fallback",
        "fallback_service",
        "any",
        "on",
        "any_service",
        "on_service",
    ];
    let start = source
        .find("fn app(")
        .expect("http/mod.rs has no `fn app(`");
    let body = enclosed(&source[start..], '{', '}');
    let mut routes = BTreeSet::new();
    // The two fallbacks that answer a fixed JSON error whatever the request (tested in
    // api_errors.rs): they reach no account's data, so they need no row.
    const ERROR_FALLBACKS: [(&str, &str); 2] = [
        ("fallback", "(errors::no_route)"),
        (
            "method_not_allowed_fallback",
            "(errors::method_not_allowed)",
        ),
    ];
    for (ident, at) in calls(body) {
        if ERROR_FALLBACKS
            .iter()
            .any(|(name, args)| ident == *name && enclosed(&body[at..], '(', ')') == *args)
        {
            continue;
        }
        assert!(
            !UNREADABLE.contains(&ident) && !ident.ends_with("_service"),
            "api::app calls `{ident}(…)`, which the route guard cannot enumerate: teach \
             routes_of_app in tests/it/isolation.rs to read it"
        );
        if ident != "route" {
            continue;
        }
        let args = enclosed(&body[at..], '(', ')');
        let open = args.find('"').expect("a .route( without a path literal");
        let close = args[open + 1..].find('"').expect("an unterminated path") + open + 1;
        let path = &args[open + 1..close];
        let methods: Vec<&str> = calls(&args[close + 1..])
            .into_iter()
            .map(|(ident, _)| ident)
            .filter(|ident| METHODS.contains(ident))
            .collect();
        assert!(!methods.is_empty(), "route {path}: no method found");
        for method in methods {
            routes.insert((method.to_uppercase(), path.to_owned()));
        }
    }
    routes
}

/// The text from the first `open` to its matching `close`, skipping string literals and line
/// comments.
fn enclosed(text: &str, open: char, close: char) -> &str {
    let start = text.find(open).expect("no opening delimiter");
    let mut depth = 0;
    let mut chars = text[start..].char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                while let Some((_, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek().map(|(_, c)| *c) == Some('/') => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return &text[start..=start + i];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced {open}{close}")
}

/// Every identifier directly followed by `(` (a call), with the offset of the `(`, outside
/// string literals and line comments.
fn calls(text: &str) -> Vec<(&str, usize)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if b.is_ascii_alphabetic() || b == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let mut j = i;
            while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                j += 1;
            }
            if bytes.get(j) == Some(&b'(') {
                found.push((&text[start..i], j));
            }
        } else {
            i += 1;
        }
    }
    found
}

// ---- the table, run ----

/// A's objects, and what the calls need.
struct Fixture {
    base: String,
    a_key: String,
    b_key: String,
    a_account: String,
    b_account: String,
    a_url: String,
    b_url: String,
    ids: BTreeMap<&'static str, String>,
    pool: SqlitePool,
}

impl Fixture {
    fn id(&self, target: Target) -> Option<&str> {
        let name = match target {
            NoId => return None,
            Endpoint => "endpoint",
            SpareEndpoint => "spare_endpoint",
            Event => "event",
            DeadDelivery => "dead_delivery",
            DeliveredDelivery => "delivered_delivery",
            Schema => "schema",
            Erasure => "erasure",
        };
        Some(self.ids[name].as_str())
    }

    /// The row's path with `id` in `{id}` (A's object unless told otherwise) and its query.
    fn path(&self, route: &Route, id: Option<&str>) -> String {
        let path = match id.or(self.id(route.target)) {
            Some(id) => route
                .path()
                .replace("{id}", id)
                .replace("{type}/{api_version}", id),
            None => route.path().to_owned(),
        };
        let query = route.query.replace("{endpoint}", &self.ids["endpoint"]);
        format!("{path}{query}")
    }

    /// Calls a row with the raw `Authorization` value `auth` (no header when `None`), `url` in
    /// the body's `{url}`, `id` (else A's object) in `{id}` and `account` in `X-Kxp-Account`;
    /// returns the status, the JSON answer and its text.
    async fn call(
        &self,
        route: &Route,
        auth: Option<&str>,
        url: &str,
        id: Option<&str>,
        account: Option<&str>,
    ) -> (u16, Value, String) {
        let method = reqwest::Method::from_bytes(route.method().as_bytes()).unwrap();
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{}", self.base, self.path(route, id)));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        for (name, value) in route.headers {
            request = request.header(*name, *value);
        }
        if let Some(account) = account {
            request = request.header(kxp_api::ACCOUNT_HEADER, account);
        }
        if let Some(body) = route.body {
            request = request
                .header("content-type", "application/json")
                .body(body.replace("{url}", url));
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, json, text)
    }

    async fn as_a(&self, route: &Route) -> (u16, Value, String) {
        let auth = format!("Bearer {}", self.a_key);
        self.call(route, Some(&auth), &self.a_url, None, None).await
    }

    async fn as_b(&self, route: &Route, id: Option<&str>) -> (u16, Value, String) {
        let auth = format!("Bearer {}", self.b_key);
        self.call(route, Some(&auth), &self.b_url, id, None).await
    }
}

fn label(route: &Route) -> String {
    let body = route.body.map(|b| format!(" {b}")).unwrap_or_default();
    format!("{}{} ({:?}){body}", route.route, route.query, route.target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_scoped_to_the_callers_account() {
    let s = sender("0s").await;
    let Db::Sqlite(pool) = s.server.db() else {
        panic!("the test sender runs on SQLite")
    };
    let a = s.api.clone();
    let a_account = s.server.db().account_by_key(&a.key).await.unwrap().unwrap();
    let (b_account, b_key) = s.server.db().create_account("b", None).await.unwrap();
    let b = a.with_key(&b_key);
    // One failure each, then 200s: with the one-try schedule, a dead and a delivered delivery.
    let rx_a = Receiver::start(vec![Reply::Status(500)]).await;
    let rx_b = Receiver::start(vec![Reply::Status(500)]).await;

    let mut f = Fixture {
        base: a.base.clone(),
        a_key: a.key.clone(),
        b_key,
        a_account: a_account.id.into_string(),
        b_account: b_account.id.into_string(),
        a_url: rx_a.url.clone(),
        b_url: rx_b.url.clone(),
        ids: BTreeMap::new(),
        pool: pool.clone(),
    };

    // A: an endpoint with a dead and a delivered delivery (signing with a secret and a key, so
    // it has a public key to show too), and a spare endpoint.
    let (a_endpoint, _) = a.endpoint(&rx_a.url, json!({"signing": "both"})).await;
    let (a_spare, _) = a
        .endpoint(&rx_a.url, json!({"event_types": ["spare.only"]}))
        .await;
    f.ids.insert("endpoint", a_endpoint);
    f.ids.insert("spare_endpoint", a_spare);
    // A schema of a version no event of the test uses, so it checks nothing.
    let (status, schema) = a
        .call(
            "PUT",
            "/v1/schemas/payment.failed/v-iso",
            Some(json!({"type": "object"})),
        )
        .await;
    assert_eq!(status, 201, "{schema}");
    f.ids.insert("schema", "payment.failed/v-iso".to_owned());
    // Done before the picture of A's rows is taken (an erasure runs for a few seconds).
    let erasure = a.client.create_erasure("order:none").await.unwrap();
    while a.client.erasure(&erasure.id).await.unwrap().status != kxp_api::ErasureStatus::Done {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f.ids.insert("erasure", erasure.id.into_string());
    let shared = ROUTES
        .iter()
        .find(|r| r.route == "POST /v1/events" && r.headers == SHARED_KEY)
        .unwrap();
    let (status, _, text) = f.as_a(shared).await;
    assert_eq!(status, 202, "{text}");
    let a_event = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let dead = a.wait_for(&a_event, "dead", Duration::from_secs(10)).await;
    let a_event_2 = a.emit("payment.succeeded", json!({"order": 2})).await;
    let delivered = a
        .wait_for(&a_event_2, "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(a.attempts(dead["id"].as_str().unwrap()).await.len(), 1);
    f.ids.insert("event", a_event.clone());
    f.ids
        .insert("dead_delivery", dead["id"].as_str().unwrap().to_owned());
    f.ids.insert(
        "delivered_delivery",
        delivered["id"].as_str().unwrap().to_owned(),
    );

    // B: the same, so that B's lists are not empty and the checks on them mean something.
    let (b_endpoint, _) = b.endpoint(&rx_b.url, json!({})).await;
    let (status, _) = b
        .call(
            "PUT",
            "/v1/schemas/payment.failed/v-b",
            Some(json!({"type": "object"})),
        )
        .await;
    assert_eq!(status, 201);
    let b_event = b.emit("payment.failed", json!({"order": 1})).await;
    b.wait_for(&b_event, "dead", Duration::from_secs(10)).await;
    let b_event_2 = b.emit("payment.succeeded", json!({"order": 2})).await;
    b.wait_for(&b_event_2, "delivered", Duration::from_secs(10))
        .await;
    // A notification each (sent already, so the notifier leaves them be), as an open circuit
    // would have left them.
    for (account, endpoint) in [
        (&f.a_account, &f.ids["endpoint"]),
        (&f.b_account, &b_endpoint),
    ] {
        sqlx::query(
            "INSERT INTO kxp_notifications (id, account_id, endpoint_id, kind, channel, target, event_id, \
             payload, status, attempts, next_attempt_at, created_at, updated_at) \
             VALUES ($1, $2, $3, 'endpoint.circuit_opened', 'email', 'ops@example.com', $4, '{}', 'sent', 1, 0, 0, 0)",
        )
        .bind(kxp_sender::new_id("ntf"))
        .bind(account)
        .bind(endpoint)
        .bind(uuid::Uuid::new_v4().to_string())
        .execute(&f.pool)
        .await
        .unwrap();
    }

    let a_ids = owned_ids(&f.pool, &f.a_account).await;
    assert_eq!(a_ids.len(), 1 + 2 + 2 + 2 + 1 + 1 + 1, "{a_ids:?}");
    let rows_before = rows_of(&f.pool, &a_ids).await;
    for table in [
        "kxp_accounts",
        "kxp_endpoints",
        "kxp_endpoint_secrets",
        "kxp_events",
        "kxp_deliveries",
        "kxp_attempts",
        "kxp_schemas",
        "kxp_notifications",
        "kxp_erasures",
    ] {
        assert!(rows_before.contains_key(table), "A has no row in {table}");
    }
    let answers_before = answers_to_a(&f).await;

    // (b) No key, or a bad one: 401 on every row, before anything else is looked at.
    let hash = kxp_sender::sha256_hex(f.a_key.as_bytes());
    let bad: [Option<String>; 7] = [
        None,
        Some("Bearer kxp_wrong".to_owned()),
        Some("Bearer kxp_op_wrong".to_owned()),
        Some("Bearer ".to_owned()),
        Some(format!("Bearer {hash}")),
        Some(format!("Basic {}", f.a_key)),
        Some(f.a_key.clone()),
    ];
    for route in ROUTES {
        for auth in &bad {
            let (status, body, _) = f.call(route, auth.as_deref(), &f.a_url, None, None).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (401, Some("unauthorized")),
                "{} with Authorization {auth:?}: {body}",
                label(route)
            );
        }
    }

    // (b') An account key naming the other account in `X-Kxp-Account`: 404 on every row,
    // whatever the route, before anything is read or written (A's rows are checked below; B's
    // are not changed by a request that never reaches a handler).
    for route in ROUTES {
        for (key, url, other) in [
            (&f.a_key, &f.a_url, &f.b_account),
            (&f.b_key, &f.b_url, &f.a_account),
        ] {
            let auth = format!("Bearer {key}");
            let (status, body, text) = f.call(route, Some(&auth), url, None, Some(other)).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (404, Some("not_found")),
                "{} naming {other}: {text}",
                label(route)
            );
        }
    }
    // Every account key on the operator routes: 401, as if it named no one.
    for route in OPERATOR {
        for key in [&f.a_key, &f.b_key] {
            let route = row(route, NoId, Empty, 401).body(r#"{"name":"mine"}"#);
            let auth = format!("Bearer {key}");
            let (status, body, text) = f.call(&route, Some(&auth), "", None, None).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (401, Some("unauthorized")),
                "{}: {text}",
                label(&route)
            );
        }
    }

    // (a) B's key.
    let mut created = Vec::new();
    for route in ROUTES {
        let (status, body, text) = f.as_b(route, None).await;
        let what = label(route);
        match route.other {
            NotFound => {
                assert_eq!(
                    (status, body["error"].as_str()),
                    (404, Some("not_found")),
                    "B, {what}: {text}"
                );
                // Exactly the answer for an id that does not exist: nothing tells B that A's
                // id is real.
                let own = f.id(route.target).unwrap();
                let made_up = made_up_id(route.target);
                let (status, _, made_up_text) = f.as_b(route, Some(&made_up)).await;
                assert_eq!(
                    (status, made_up_text.replace(&made_up, "{id}")),
                    (404, text.replace(own, "{id}")),
                    "B, {what}: A's id and a made-up one answer differently"
                );
            }
            OnlyOwn | Empty => {
                assert_eq!(status, 200, "B, {what}: {text}");
                let listed: Vec<&str> = body["data"]
                    .as_array()
                    .unwrap_or_else(|| panic!("B, {what}: not a list: {text}"))
                    .iter()
                    .map(|item| item["id"].as_str().unwrap())
                    .collect();
                if route.other == Empty {
                    assert!(listed.is_empty(), "B, {what}: {text}");
                } else {
                    let b_ids = owned_ids(&f.pool, &f.b_account).await;
                    assert!(!listed.is_empty(), "B, {what}: B's own objects are missing");
                    assert!(
                        listed.iter().all(|id| b_ids.contains(*id)),
                        "B, {what}: {text}"
                    );
                }
            }
            CreatesOwn(expected) => {
                assert_eq!(status, expected, "B, {what}: {text}");
                // What B created is B's: B can read it back, A cannot.
                let id = body["id"].as_str().unwrap().to_owned();
                let path = format!("{}/{id}", route.path());
                let (b_status, _) = b.call("GET", &path, None).await;
                let (a_status, _) = a.call("GET", &path, None).await;
                assert_eq!((b_status, a_status), (200, 404), "B, {what}: {id}");
                created.push((route.path(), id));
            }
            OwnCopy(expected) => {
                assert_eq!(status, expected, "B, {what}: {text}");
                let (b_status, b_copy) = b.call("GET", &f.path(route, None), None).await;
                assert_eq!((b_status, &b_copy["id"]), (200, &body["id"]), "B, {what}");
            }
            OwnAccount => {
                assert_eq!(
                    (status, body["id"].as_str()),
                    (200, Some(f.b_account.as_str())),
                    "B, {what}: {text}"
                );
            }
            OwnLink(expected) => {
                assert_eq!(status, expected, "B, {what}: {text}");
                let token = body["url"].as_str().unwrap().rsplit('/').next().unwrap();
                let owner = token_owner(&f.pool, "kxp_portal_links", token).await;
                assert_eq!(owner, f.b_account, "B, {what}");
            }
            OwnToken(expected) => {
                assert_eq!(status, expected, "B, {what}: {text}");
                let token = body["token"].as_str().unwrap();
                let owner = token_owner(&f.pool, "kxp_listen_tokens", token).await;
                assert_eq!(owner, f.b_account, "B, {what}");
            }
        }
        assert!(
            a_ids.iter().all(|id| !text.contains(id.as_str())),
            "B, {what}: the answer shows one of A's ids: {text}"
        );
    }
    let b_ids = owned_ids(&f.pool, &f.b_account).await;
    assert!(
        created
            .iter()
            .all(|(_, id)| b_ids.contains(id) && !a_ids.contains(id)),
        "{created:?}"
    );

    // B's new event reached B's endpoints, and nothing of B's ever reached A's receiver.
    for (_, event) in created.iter().filter(|(path, _)| *path == "/v1/events") {
        settled(&b, event).await;
        let endpoints: BTreeSet<String> = b
            .deliveries_of(event)
            .await
            .iter()
            .map(|d| d["endpoint_id"].as_str().unwrap().to_owned())
            .collect();
        assert!(endpoints.contains(&b_endpoint), "{endpoints:?}");
        assert!(endpoints.iter().all(|e| b_ids.contains(e)), "{endpoints:?}");
    }
    let seen_by_a: BTreeSet<String> = rx_a.seen().iter().map(|r| r.event_id()).collect();
    assert_eq!(
        seen_by_a,
        BTreeSet::from([a_event.clone(), a_event_2.clone()])
    );

    // (d) Not a byte of A's rows changed, nor any answer A gets.
    assert_eq!(owned_ids(&f.pool, &f.a_account).await, a_ids);
    assert_eq!(rows_of(&f.pool, &a_ids).await, rows_before);
    assert_eq!(answers_to_a(&f).await, answers_before);

    // (e) A's own listen token: 403 on every route but the listen routes, where A's push
    // endpoints are not its to see (404) nor a push endpoint its to make (403); 403 on the
    // operator routes; and no feed credential (401).
    let (_, token, text) = f
        .as_a(&row("POST /v1/listen-tokens", NoId, Empty, 201))
        .await;
    let auth = format!("Bearer {}", token["token"].as_str().expect(&text));
    for route in ROUTES {
        let (status, body, text) = f.call(route, Some(&auth), &f.a_url, None, None).await;
        let listen = LISTEN_ROUTES.contains(&route.route);
        let expected = match (listen, route.method()) {
            (true, "GET" | "DELETE") => (404, "not_found"),
            _ => (403, "forbidden"),
        };
        assert_eq!(
            (status, body["error"].as_str()),
            (expected.0, Some(expected.1)),
            "listen token, {}: {text}",
            label(route)
        );
    }
    for route in OPERATOR {
        let route = row(route, NoId, Empty, 403).body(r#"{"name":"mine"}"#);
        let (status, body, text) = f.call(&route, Some(&auth), "", None, None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (403, Some("forbidden")),
            "{text}"
        );
    }
    for route in ENDPOINT_CREDENTIAL {
        let route = row(route, Endpoint, Empty, 401);
        let (status, _, text) = f.call(&route, Some(&auth), "", None, None).await;
        assert_eq!(status, 401, "listen token, {}: {text}", label(&route));
    }

    // (c) A's key: every row succeeds, and A's lists hold none of B's objects.
    for route in ROUTES {
        let (status, _, text) = f.as_a(route).await;
        assert_eq!(status, route.owner, "A, {}: {text}", label(route));
        assert!(
            b_ids.iter().all(|id| !text.contains(id.as_str())),
            "A, {}: the answer shows one of B's ids: {text}",
            label(route)
        );
    }

    // Public routes need no key and name no account's objects. (`/jwks/{id}` answers an
    // endpoint's public keys to anyone with its id, by design; ed25519.rs tests it.)
    for public in PUBLIC.iter().filter(|route| !route.contains('{')) {
        let (status, _, text) = f
            .call(&row(public, NoId, Empty, 200), None, "", None, None)
            .await;
        assert_eq!(status, 200, "{public}: {text}");
        assert!(
            a_ids
                .iter()
                .chain(&b_ids)
                .all(|id| !text.contains(id.as_str())),
            "{public}: {text}"
        );
    }
    s.server.shutdown().await;
}

/// A producer-chosen event id is the account's own: the same id from two accounts is two
/// events, whichever account sends it first, and neither answer says anything of the other's.
/// Before, ids were one namespace: B posting A's id got 422 (learning it existed), and B
/// posting an id first made A's later event with it be refused for good (an outbox kept it as
/// refused, and the payment's webhook was never sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chosen_event_id_is_unique_per_account_only() {
    let s = sender("0s").await;
    let a = s.api.clone();
    let (_, b_key) = s.server.db().create_account("b", None).await.unwrap();
    let b = a.with_key(&b_key);
    let (rx_a, rx_b) = (Receiver::start(vec![]).await, Receiver::start(vec![]).await);
    a.endpoint(&rx_a.url, json!({})).await;
    b.endpoint(&rx_b.url, json!({})).await;

    // A first, then B with the very same request; then B first, then A.
    let first = "0190f1e2-7c3a-7def-8abc-0123456789ab";
    let second = "0190f1e2-7c3a-7def-8abc-0123456789ac";
    for (id, order) in [
        (first, [(&a, "a"), (&b, "b")]),
        (second, [(&b, "b"), (&a, "a")]),
    ] {
        for (api, who) in order {
            let body = json!({"id": id, "type": "payment.succeeded", "data": {"by": "same"}});
            let (status, answer) = api.call("POST", "/v1/events", Some(body.clone())).await;
            assert_eq!(
                (status, answer["id"].as_str()),
                (202, Some(id)),
                "{who}: {answer}"
            );
            let (status, again) = api.call("POST", "/v1/events", Some(body)).await;
            assert_eq!(
                (status, &again),
                (202, &answer),
                "{who}: a repeat answers its own"
            );
            let other = json!({"id": id, "type": "payment.succeeded", "data": {"by": who}});
            let (status, error) = api.call("POST", "/v1/events", Some(other)).await;
            assert_eq!(
                (status, error["error"].as_str()),
                (422, Some("idempotency_key_reused")),
                "{who}: its own id with another body"
            );
        }
        for (api, rx) in [(&a, &rx_a), (&b, &rx_b)] {
            api.wait_for(id, "delivered", Duration::from_secs(10)).await;
            let deliveries = api.deliveries_of(id).await;
            assert_eq!(deliveries.len(), 1, "{deliveries:?}");
            let seen = rx.seen().into_iter().filter(|r| r.event_id() == id).count();
            assert_eq!(seen, 1, "each account's receiver gets its own event once");
        }
    }
    let Db::Sqlite(pool) = s.server.db() else {
        panic!("the test sender runs on SQLite")
    };
    let events: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM kxp_events")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(events, 4, "two ids, two accounts: four events");
    s.server.shutdown().await;
}

/// An id of the same shape as A's, that nothing has.
fn made_up_id(target: Target) -> String {
    match target {
        Endpoint | SpareEndpoint => "ep_00000000000000000000000000000000".to_owned(),
        Event => "00000000-0000-4000-8000-000000000000".to_owned(),
        DeadDelivery | DeliveredDelivery => "dlv_00000000000000000000000000000000".to_owned(),
        Schema => "no.such.type/v0".to_owned(),
        Erasure => "er_00000000000000000000000000000000".to_owned(),
        NoId => unreachable!("a 404 row addresses an object"),
    }
}

/// Waits until none of the event's deliveries is pending or in flight.
/// The account a stored token (a portal link's, a listen token) belongs to.
async fn token_owner(pool: &SqlitePool, table: &str, token: &str) -> String {
    sqlx::query_scalar(&format!(
        "SELECT account_id FROM {table} WHERE token_hash = $1"
    ))
    .bind(kxp_sender::sha256_hex(token.as_bytes()))
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn settled(api: &Api, event_id: &str) {
    let start = Instant::now();
    loop {
        let deliveries = api.deliveries_of(event_id).await;
        if !deliveries.is_empty()
            && deliveries
                .iter()
                .all(|d| d["status"] == "delivered" || d["status"] == "dead")
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{event_id}: {deliveries:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The account's id and the ids of every endpoint, event, delivery and schema it owns.
async fn owned_ids(pool: &SqlitePool, account_id: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::from([account_id.to_owned()]);
    for table in [
        "kxp_endpoints",
        "kxp_events",
        "kxp_deliveries",
        "kxp_schemas",
        "kxp_notifications",
        "kxp_erasures",
    ] {
        let rows: Vec<String> =
            sqlx::query_scalar(&format!("SELECT id FROM {table} WHERE account_id = $1"))
                .bind(account_id)
                .fetch_all(pool)
                .await
                .unwrap();
        ids.extend(rows);
    }
    ids
}

/// Every row of every `kxp_` table (including tables added later) that mentions one of `ids`,
/// each rendered with SQLite's `quote()` column by column: a full picture of one account's data.
async fn rows_of(pool: &SqlitePool, ids: &BTreeSet<String>) -> BTreeMap<String, Vec<String>> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'kxp%' ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut picture = BTreeMap::new();
    for table in tables {
        let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info($1)")
            .bind(&table)
            .fetch_all(pool)
            .await
            .unwrap();
        let row = columns
            .iter()
            .map(|c| format!("'{c}=' || quote(\"{c}\")"))
            .collect::<Vec<_>>()
            .join(" || ' ' || ");
        let rows: Vec<String> =
            sqlx::query_scalar(&format!("SELECT {row} FROM \"{table}\" ORDER BY rowid"))
                .fetch_all(pool)
                .await
                .unwrap();
        let mine: Vec<String> = rows
            .into_iter()
            .filter(|r| ids.iter().any(|id| r.contains(id.as_str())))
            .collect();
        if !mine.is_empty() {
            picture.insert(table, mine);
        }
    }
    picture
}

/// What A gets from every GET row of the table.
async fn answers_to_a(f: &Fixture) -> Vec<(String, u16, String)> {
    let mut answers = Vec::new();
    for route in ROUTES.iter().filter(|r| r.method() == "GET") {
        let (status, _, text) = f.as_a(route).await;
        assert_eq!(status, 200, "A, {}: {text}", label(route));
        answers.push((label(route), status, text));
    }
    answers
}
