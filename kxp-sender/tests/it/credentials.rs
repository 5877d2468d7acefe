//! Endpoint credentials (`headers`, `auth`): custom headers, HTTP Basic, a bearer token and an
//! OAuth2 access token (client credentials, from a token server on 127.0.0.1) arrive with every
//! delivery, and the endpoint challenge; names the sender sets itself are refused; the token is
//! fetched once for many deliveries, again when it expires or the endpoint answers 401, and a
//! token server that fails fails attempts with `auth_failed` while nothing reaches the receiver.
//! No credential shows in an answer, in `/metrics` or in the database file under a key ring.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kxp_api::{EndpointPatch, PortalScope};
use serde_json::{Value, json};

use crate::console::Browser;
use crate::console_pages::{account_page, page, post_form};
use crate::sealed_secrets::{K1, file_bytes, holds, ring};
use crate::support::{Api, Database, Receiver, Reply, sender, sender_with, typed};

/// What the token server answers.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Tokens,
    Down,
    Garbage,
}

/// An OAuth2 token server on 127.0.0.1: `tok-1`, `tok-2`, … for each request, each valid for
/// `expires_in` seconds; it records each request's `Authorization` and form body.
#[derive(Clone)]
pub(crate) struct TokenServer {
    pub(crate) url: String,
    state: Arc<TokenState>,
}

struct TokenState {
    fetches: AtomicUsize,
    expires_in: AtomicU64,
    mode: Mutex<Mode>,
    requests: Mutex<Vec<(String, String)>>,
}

impl TokenServer {
    pub(crate) async fn start(expires_in: u64) -> TokenServer {
        let state = Arc::new(TokenState {
            fetches: AtomicUsize::new(0),
            expires_in: AtomicU64::new(expires_in),
            mode: Mutex::new(Mode::Tokens),
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new().fallback(issue).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/oauth/token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        TokenServer { url, state }
    }

    fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }

    pub(crate) fn set(&self, mode: Mode) {
        *self.state.mode.lock().unwrap() = mode;
    }

    pub(crate) fn auth(&self, extra: Value) -> Value {
        let mut auth = json!({
            "type": "oauth2_client_credentials",
            "token_url": self.url,
            "client_id": "merchant-client",
            "client_secret": "client-s3cret/+=",
        });
        auth.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        auth
    }
}

async fn issue(State(state): State<Arc<TokenState>>, headers: HeaderMap, body: String) -> Response {
    let authorization = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    state.requests.lock().unwrap().push((authorization, body));
    let n = state.fetches.fetch_add(1, Ordering::SeqCst) + 1;
    match *state.mode.lock().unwrap() {
        Mode::Tokens => axum::Json(json!({
            "access_token": format!("tok-{n}"),
            "token_type": "Bearer",
            "expires_in": state.expires_in.load(Ordering::SeqCst),
        }))
        .into_response(),
        Mode::Down => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_client", "error_description": "nope"})),
        )
            .into_response(),
        Mode::Garbage => (StatusCode::OK, "<html>maintenance</html>").into_response(),
    }
}

/// A receiver behind a gateway: 401 unless the request carries a bearer token it has not
/// revoked; records every request's `Authorization` (empty when none).
#[derive(Clone)]
struct Gateway {
    url: String,
    revoked: Arc<Mutex<HashSet<String>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    async fn start() -> Gateway {
        let gateway = Gateway {
            url: String::new(),
            revoked: Arc::default(),
            seen: Arc::default(),
        };
        let app = Router::new().fallback(guard).with_state(gateway.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Gateway { url, ..gateway }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

async fn guard(State(gateway): State<Gateway>, headers: HeaderMap) -> StatusCode {
    let authorization = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    gateway.seen.lock().unwrap().push(authorization.clone());
    match authorization.strip_prefix("Bearer ") {
        Some(token) if !gateway.revoked.lock().unwrap().contains(token) => StatusCode::OK,
        _ => StatusCode::UNAUTHORIZED,
    }
}

/// Emits `n` events and waits until each is delivered.
async fn deliver(api: &Api, n: usize) {
    let mut events = Vec::new();
    for i in 0..n {
        events.push(api.emit("payment.succeeded", json!({"n": i})).await);
    }
    for event in events {
        api.wait_for(&event, "delivered", Duration::from_secs(60))
            .await;
    }
}

each_backend!(
    basic_bearer_and_custom_headers_arrive_as_configured_and_never_show_again,
    a_401_from_the_endpoint_drops_the_token_and_exactly_one_fetch_follows,
);
on_citus!(
    basic_bearer_and_custom_headers_arrive_as_configured_and_never_show_again,
    a_401_from_the_endpoint_drops_the_token_and_exactly_one_fetch_follows,
);

async fn basic_bearer_and_custom_headers_arrive_as_configured_and_never_show_again(db: Database) {
    let s = db.sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s
        .api
        .endpoint(
            &receiver.url,
            json!({
                "headers": {"X-Gateway-Key": "gw-k3y-value", "X-Tenant": "t-42"},
                "auth": {"type": "basic", "username": "merchant", "password": "pa55:word"},
            }),
        )
        .await;
    deliver(&s.api, 1).await;
    let seen = receiver.seen();
    let first = &seen[0];
    assert_eq!(first.header("x-gateway-key"), "gw-k3y-value");
    assert_eq!(first.header("x-tenant"), "t-42");
    // base64("merchant:pa55:word")
    assert_eq!(
        first.header("authorization"),
        "Basic bWVyY2hhbnQ6cGE1NTp3b3Jk"
    );
    assert!(!first.header("x-kxp-signature").is_empty());

    let (status, shown) = s
        .api
        .call("GET", &format!("/v1/endpoints/{id}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(shown["headers"], json!(["X-Gateway-Key", "X-Tenant"]));
    assert_eq!(
        shown["auth"],
        json!({"type": "basic", "username": "merchant", "password": "redacted"})
    );

    // A bearer token instead; the headers stay as they were.
    let patch: EndpointPatch = typed(json!({"auth": {"type": "bearer", "token": "b3arer-t0ken"}}));
    let updated = s
        .api
        .client
        .update_endpoint(&id.as_str().into(), &patch)
        .await
        .unwrap();
    assert_eq!(updated.endpoint.headers, ["X-Gateway-Key", "X-Tenant"]);
    deliver(&s.api, 1).await;
    let last = receiver.seen().last().unwrap().clone();
    assert_eq!(last.header("authorization"), "Bearer b3arer-t0ken");
    assert_eq!(last.header("x-gateway-key"), "gw-k3y-value");

    // Both removed: the next delivery carries neither.
    let patch: EndpointPatch = typed(json!({"headers": null, "auth": null}));
    let updated = s
        .api
        .client
        .update_endpoint(&id.as_str().into(), &patch)
        .await
        .unwrap();
    assert!(updated.endpoint.headers.is_empty() && updated.endpoint.auth.is_none());
    deliver(&s.api, 1).await;
    let last = receiver.seen().last().unwrap().clone();
    assert!(last.header("authorization").is_empty() && last.header("x-gateway-key").is_empty());

    let (_, list) = s.api.call("GET", "/v1/endpoints", None).await;
    let metrics = reqwest::get(format!("{}/metrics", s.api.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for text in [shown.to_string(), list.to_string(), metrics] {
        for secret in ["gw-k3y-value", "pa55:word", "b3arer-t0ken", "t-42"] {
            assert!(!text.contains(secret), "{secret} shows: {text}");
        }
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn names_the_sender_sets_are_refused_naming_the_header() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    for name in [
        "Host",
        "Content-Type",
        "Content-Length",
        "Transfer-Encoding",
        "Connection",
        "X-Kxp-Signature",
        "webhook-id",
        "traceparent",
    ] {
        let body = json!({"url": receiver.url, "skip_challenge": true, "headers": {name: "v4lue"}});
        let (status, error) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 422, "{name}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(name), "{message}");
        assert!(!message.contains("v4lue"), "{message}");
    }
    let body = json!({
        "url": receiver.url, "skip_challenge": true,
        "headers": {"Authorization": "Custom x"},
        "auth": {"type": "bearer", "token": "t"},
    });
    let (status, error) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 422, "{error}");
    // `Authorization` alone is the merchant's own scheme; `auth` added later is refused.
    let (id, _) = s
        .api
        .endpoint(
            &receiver.url,
            json!({"headers": {"Authorization": "Custom x"}}),
        )
        .await;
    let (status, error) = s
        .api
        .call(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"auth": {"type": "bearer", "token": "t"}})),
        )
        .await;
    assert_eq!(status, 422, "{error}");
    assert!(error.to_string().contains("Authorization"), "{error}");
    for auth in [
        json!({"type": "basic", "username": "a:b", "password": "p"}),
        json!({"type": "bearer", "token": "line\nbreak"}),
        json!({"type": "oauth2_client_credentials", "token_url": "ftp://x/", "client_id": "c", "client_secret": "s"}),
        json!({"type": "oauth2_client_credentials", "token_url": "https://t.example/", "client_id": "c", "client_secret": "s", "client_auth": "jwt"}),
        json!({"type": "digest"}),
    ] {
        let body = json!({"url": receiver.url, "skip_challenge": true, "auth": auth});
        let (status, error) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 422, "{auth}: {error}");
    }
    s.server.shutdown().await;
}

/// A receiver that answers the endpoint challenge only when the gateway key comes with it.
async fn challenged_gateway() -> String {
    async fn answer(headers: HeaderMap, Query(query): Query<Vec<(String, String)>>) -> Response {
        if headers.get("x-gateway-key").is_none_or(|v| v != "gw") {
            return StatusCode::FORBIDDEN.into_response();
        }
        let token = query
            .into_iter()
            .find(|(k, _)| k == "challenge")
            .map(|(_, v)| v);
        token.unwrap_or_default().into_response()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = Router::new().fallback(answer);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn the_challenge_presents_the_credentials_and_a_bad_client_secret_is_found_at_registration() {
    let s = sender("0s").await;
    let url = challenged_gateway().await;
    let without = json!({"url": url});
    let (status, error) = s.api.call("POST", "/v1/endpoints", Some(without)).await;
    assert_eq!(status, 422, "{error}");
    let with = json!({"url": url, "headers": {"X-Gateway-Key": "gw"}});
    let (status, created) = s.api.call("POST", "/v1/endpoints", Some(with)).await;
    assert_eq!(status, 201, "{created}");

    let tokens = TokenServer::start(3600).await;
    tokens.set(Mode::Down);
    let body =
        json!({"url": url, "headers": {"X-Gateway-Key": "gw"}, "auth": tokens.auth(json!({}))});
    let (status, error) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 422, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("auth_failed") && message.contains("invalid_client"),
        "{message}"
    );
    assert!(!message.contains("client-s3cret"), "{message}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn one_oauth2_token_serves_200_deliveries_and_is_fetched_again_once_it_expires() {
    let s = sender("0s").await;
    let gateway = Gateway::start().await;
    let tokens = TokenServer::start(3600).await;
    let auth =
        tokens.auth(json!({"scope": "webhooks:write", "audience": "https://merchant.example"}));
    let (id, _) = s.api.endpoint(&gateway.url, json!({"auth": auth})).await;
    deliver(&s.api, 200).await;
    assert_eq!(tokens.fetches(), 1);
    let seen = gateway.seen();
    assert_eq!(seen.len(), 200);
    assert!(seen.iter().all(|a| a == "Bearer tok-1"), "{seen:?}");
    // client_secret_basic: the form-encoded id and secret; the grant, scope and audience in
    // the form.
    let (authorization, form) = tokens.state.requests.lock().unwrap()[0].clone();
    assert_eq!(
        authorization,
        format!(
            "Basic {}",
            base64_of("merchant-client:client-s3cret%2F%2B%3D")
        )
    );
    assert_eq!(
        form,
        "grant_type=client_credentials&scope=webhooks%3Awrite&audience=https%3A%2F%2Fmerchant.example"
    );

    // Tokens that live one second: one delivery now, one after it expired, a fetch each.
    tokens.state.expires_in.store(1, Ordering::SeqCst);
    let patch: EndpointPatch = typed(json!({"auth": tokens.auth(json!({"client_auth": "post"}))}));
    s.api
        .client
        .update_endpoint(&id.as_str().into(), &patch)
        .await
        .unwrap();
    deliver(&s.api, 1).await;
    assert_eq!(tokens.fetches(), 2, "a new configuration fetches anew");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    deliver(&s.api, 1).await;
    assert_eq!(tokens.fetches(), 3);
    assert_eq!(gateway.seen()[200..], ["Bearer tok-2", "Bearer tok-3"]);
    let (authorization, form) = tokens.state.requests.lock().unwrap()[2].clone();
    assert!(
        authorization.is_empty(),
        "client_secret_post sends no Basic"
    );
    assert!(
        form.contains("client_id=merchant-client&client_secret=client-s3cret%2F%2B%3D"),
        "{form}"
    );
    s.server.shutdown().await;
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn a_401_from_the_endpoint_drops_the_token_and_exactly_one_fetch_follows(db: Database) {
    let s = db.sender("0s,100ms,100ms,100ms,100ms").await;
    let gateway = Gateway::start().await;
    let tokens = TokenServer::start(3600).await;
    s.api
        .endpoint(&gateway.url, json!({"auth": tokens.auth(json!({}))}))
        .await;
    deliver(&s.api, 5).await;
    assert_eq!(tokens.fetches(), 1);
    // The merchant's gateway revokes the token: every attempt with it is refused.
    gateway.revoked.lock().unwrap().insert("tok-1".to_owned());
    deliver(&s.api, 10).await;
    assert_eq!(tokens.fetches(), 2, "one fetch after however many 401s");
    let seen = gateway.seen();
    let after = &seen[5..];
    assert!(after.iter().any(|a| a == "Bearer tok-1"), "{after:?}");
    assert_eq!(
        after.iter().filter(|a| *a == "Bearer tok-2").count(),
        10,
        "{after:?}"
    );
    s.server.shutdown().await;
}

/// The first attempt of a new event, once it is recorded.
async fn first_attempt(api: &Api) -> Value {
    let event = api.emit("payment.succeeded", json!({})).await;
    loop {
        let deliveries = api.deliveries_of(&event).await;
        let attempts = api.attempts(deliveries[0]["id"].as_str().unwrap()).await;
        if let Some(first) = attempts.first() {
            return first.clone();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_failing_token_server_fails_attempts_with_auth_failed_and_nothing_is_sent() {
    let s = sender("0s,1m").await;
    let gateway = Gateway::start().await;
    let tokens = TokenServer::start(3600).await;
    tokens.set(Mode::Down);
    s.api
        .endpoint(&gateway.url, json!({"auth": tokens.auth(json!({}))}))
        .await;
    let refused = first_attempt(&s.api).await;
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.starts_with("auth_failed: token endpoint answered 400"),
        "{error}"
    );
    assert!(
        error.contains("invalid_client") && !error.contains("nope"),
        "{error}"
    );
    tokens.set(Mode::Garbage);
    let garbage = first_attempt(&s.api).await;
    let error = garbage["error"].as_str().unwrap();
    assert!(
        error.starts_with("auth_failed:") && error.contains("not a token response"),
        "{error}"
    );
    assert_eq!(tokens.fetches(), 2);
    assert!(
        gateway.seen().is_empty(),
        "nothing reaches the receiver without a token"
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn credentials_are_sealed_at_rest_and_counted_by_the_census() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let keys = ring(&[K1]);
    let s = sender_with("0s", {
        let url = url.clone();
        move |c| {
            c.database_url = url;
            c.secrets_key = Some(keys);
        }
    })
    .await;
    let receiver = Receiver::start(vec![]).await;
    s.api
        .endpoint(
            &receiver.url,
            json!({
                "headers": {"X-Gateway-Key": "gw-sealed-value"},
                "auth": {"type": "bearer", "token": "sealed-b3arer"},
            }),
        )
        .await;
    deliver(&s.api, 1).await;
    assert_eq!(
        receiver.seen()[0].header("authorization"),
        "Bearer sealed-b3arer"
    );
    let census = s.server.db().sealing_census().await.unwrap();
    // The endpoint's secret and its credentials, both under k1.
    assert_eq!(census.get(&Some("k1".to_owned())), Some(&2), "{census:?}");
    s.server.shutdown().await;
    let bytes = file_bytes(dir.path());
    for secret in ["gw-sealed-value", "sealed-b3arer"] {
        assert!(
            !holds(&bytes, secret),
            "{secret} in the clear in the database file"
        );
    }
    assert!(holds(&bytes, "X-Gateway-Key"), "the names are not secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_replaces_headers_and_authentication_and_never_shows_a_value() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (account, csrf) = account_page(&b, &cookie).await;
    let receiver = Receiver::start(vec![]).await;
    let tokens = TokenServer::start(3600).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let credentials = format!("{account}/endpoints/{id}/credentials");
    let (status, html) = page(&b, &credentials, &cookie).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("the signature only"), "{html}");

    let saved = post_form(
        &b,
        &format!("{credentials}/headers"),
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("headers", "X-Gateway-Key: console-gw\nX-Tenant: 7"),
        ],
    )
    .await;
    assert_eq!(saved.status(), 303);
    let saved = post_form(
        &b,
        &format!("{credentials}/auth"),
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("type", "oauth2_client_credentials"),
            ("token_url", &tokens.url),
            ("client_id", "console-client"),
            ("client_secret", "console-s3cret"),
            ("scope", ""),
            ("client_auth", "post"),
        ],
    )
    .await;
    assert_eq!(saved.status(), 303);
    deliver(&s.api, 1).await;
    let seen = receiver.seen()[0].clone();
    assert_eq!(seen.header("x-gateway-key"), "console-gw");
    assert_eq!(seen.header("authorization"), "Bearer tok-1");

    let (_, endpoint) = page(&b, &format!("{account}/endpoints/{id}"), &cookie).await;
    assert!(
        endpoint.contains("X-Gateway-Key") && endpoint.contains("console-client"),
        "{endpoint}"
    );
    // A reserved name is refused on the page, with the form empty again.
    let refused = post_form(
        &b,
        &format!("{credentials}/headers"),
        &cookie,
        &[("csrf_token", &csrf), ("headers", "Host: evil.example")],
    )
    .await;
    assert_eq!(refused.status(), 422);
    let refused = refused.text().await.unwrap();
    assert!(
        refused.contains("Not saved: headers: `Host` cannot be set"),
        "{refused}"
    );
    let (_, again) = page(&b, &credentials, &cookie).await;
    for html in [&endpoint, &again, &refused] {
        for secret in ["console-gw", "console-s3cret", "tok-1"] {
            assert!(!html.contains(secret), "{secret} on a page");
        }
    }
    // `none` removes the authentication.
    let removed = post_form(
        &b,
        &format!("{credentials}/auth"),
        &cookie,
        &[("csrf_token", &csrf), ("type", "none")],
    )
    .await;
    assert_eq!(removed.status(), 303);
    let shown = s.api.client.endpoint(&id.as_str().into()).await.unwrap();
    let shown = shown.endpoint;
    assert!(shown.auth.is_none() && shown.headers == ["X-Gateway-Key", "X-Tenant"]);
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_redirect_to_another_origin_gets_the_delivery_without_the_credentials() {
    let s = sender("0s").await;
    let elsewhere = Receiver::start(vec![]).await;
    let gateway = Receiver::start(vec![
        // Same origin first: the credentials follow; then another origin: they do not.
        Reply::Redirect(307, "/moved".to_owned()),
        Reply::Redirect(307, elsewhere.url.clone()),
    ])
    .await;
    s.api
        .endpoint(
            &gateway.url,
            json!({"headers": {"X-Gateway-Key": "gw-redirect"}, "auth": {"type": "bearer", "token": "t0k"}}),
        )
        .await;
    deliver(&s.api, 1).await;
    let at_gateway = gateway.seen();
    assert_eq!(at_gateway.len(), 2);
    for seen in &at_gateway {
        assert_eq!(seen.header("authorization"), "Bearer t0k");
        assert_eq!(seen.header("x-gateway-key"), "gw-redirect");
    }
    let moved = &elsewhere.seen()[0];
    assert!(moved.header("authorization").is_empty() && moved.header("x-gateway-key").is_empty());
    assert!(
        !moved.header("x-kxp-signature").is_empty(),
        "the delivery itself still goes"
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_of_headers_and_auth_both_stay() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let path = format!("/v1/endpoints/{id}");
    for round in 0..10 {
        let headers = json!({"headers": {"X-Round": round.to_string()}});
        let auth = json!({"auth": {"type": "bearer", "token": format!("t{round}")}});
        let (a, b) = futures_util::join!(
            s.api.call("PATCH", &path, Some(headers)),
            s.api.call("PATCH", &path, Some(auth))
        );
        assert_eq!((a.0, b.0), (200, 200), "{a:?} {b:?}");
        let (_, shown) = s.api.call("GET", &path, None).await;
        assert_eq!(
            shown["headers"],
            json!(["X-Round"]),
            "round {round}: {shown}"
        );
        assert_eq!(shown["auth"]["type"], "bearer", "round {round}: {shown}");
        // Clear both for the next round.
        let (status, _) = s
            .api
            .call("PATCH", &path, Some(json!({"headers": null, "auth": null})))
            .await;
        assert_eq!(status, 200);
    }
    deliver(&s.api, 1).await;
    assert!(receiver.seen()[0].header("authorization").is_empty());
    s.server.shutdown().await;
}
