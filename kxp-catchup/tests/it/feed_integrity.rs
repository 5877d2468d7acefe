//! Feed items are the sender's as a whole: a proxy on 127.0.0.1 between the receiver and a real
//! `kxp serve` alters one item's number, ordering key, event, body or MAC, or the page's
//! endpoint, and `FeedClient::page` refuses the page whole (`forged`), before any handler sees
//! an item; the same pages through no proxy, or through the proxy altering nothing, are
//! accepted. And `FeedClient::new` refuses a sender over plain HTTP to another host than this
//! machine, before any connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kxp_axum::catch_up::CatchUpConfig;
use kxp_catchup::{Answer, Credential, FeedClient, FeedError};
use serde_json::{Value, json};

use crate::{SECS_20, register, sender, start_app};

/// What the proxy does to a 200 page before passing it on.
type Alter = Box<dyn Fn(&mut Value) + Send + Sync>;

/// A proxy on a loopback port in front of the sender at `upstream`: forwards each request
/// with its credential headers and passes the answer back, a 200 page altered by the current
/// `alter`.
struct Proxy {
    base: String,
    alter: Arc<Mutex<Alter>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let alter: Arc<Mutex<Alter>> = Arc::new(Mutex::new(Box::new(|_: &mut Value| {})));
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let (upstream, shared) = (upstream.to_owned(), alter.clone());
        let app = Router::new().fallback(move |request: Request| {
            let (http, upstream, alter) = (http.clone(), upstream.clone(), shared.clone());
            async move { forward(&http, &upstream, &alter, request).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Proxy { base, alter, task }
    }

    fn alter(&self, alter: impl Fn(&mut Value) + Send + Sync + 'static) {
        *self.alter.lock().unwrap() = Box::new(alter);
    }

    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn forward(
    http: &reqwest::Client,
    upstream: &str,
    alter: &Mutex<Alter>,
    request: Request,
) -> Response {
    let target = request.uri().path_and_query().unwrap().as_str().to_owned();
    let mut forwarded = http.get(format!("{upstream}{target}"));
    for name in ["x-kxp-feed-signature", "authorization"] {
        if let Some(value) = request.headers().get(name) {
            forwarded = forwarded.header(name, value.as_bytes());
        }
    }
    let answer = forwarded.send().await.unwrap();
    let mut status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
    let mut body: Value = answer.json().await.unwrap();
    if status == StatusCode::OK {
        (alter.lock().unwrap())(&mut body);
        // A forgery may answer with another status: the alteration says which in `__status`.
        if let Some(code) = body.as_object_mut().unwrap().remove("__status") {
            status = StatusCode::from_u16(u16::try_from(code.as_u64().unwrap()).unwrap()).unwrap();
        }
    }
    let headers = [("content-type", "application/json")];
    (status, headers, Bytes::from(body.to_string())).into_response()
}

/// A sender with one endpoint and three events in its feed (keys `pay_1`, none, `pay_1`).
struct Feed {
    server: kxp_sender::Server,
    client: kxp_api::Client,
    base: String,
    endpoint: String,
    secret: String,
    _dir: tempfile::TempDir,
}

async fn feed_of_three() -> Feed {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = sender(dir.path()).await;
    let base = format!("http://{}", server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    for (n, key) in [(1, Some("pay_1")), (2, None), (3, Some("pay_1"))] {
        let mut event = kxp_api::NewEvent::new("payment.updated", &json!({"n": n})).unwrap();
        if let Some(key) = key {
            event = event.ordering_key(key);
        }
        client.create_event(&event, None).await.unwrap();
    }
    let feed = FeedClient::new(&base, credential(&secret)).unwrap();
    let start = Instant::now();
    while page(&feed, &endpoint).await.unwrap().items.len() < 3 {
        assert!(
            start.elapsed() < SECS_20,
            "the sender never numbered three events"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Feed {
        server,
        client,
        base,
        endpoint,
        secret,
        _dir: dir,
    }
}

fn credential(secret: &str) -> Credential {
    Credential::Secret(kxp_verify::Secret::new(secret).unwrap())
}

/// The feed's first page; the sender's rate limit (20 requests a second) waited out.
async fn page(feed: &FeedClient, endpoint: &str) -> Result<kxp_api::FeedPage, FeedError> {
    loop {
        match feed.page(endpoint, 0, 100).await {
            Ok(Answer::Page(page)) => return Ok(page),
            Ok(Answer::Purged { earliest }) => panic!("purged up to {earliest}"),
            Err(FeedError::RateLimited(wait)) => tokio::time::sleep(wait).await,
            Err(e) => return Err(e),
        }
    }
}

/// Each way of altering a page in transit, by name.
fn forgeries() -> Vec<(&'static str, Alter)> {
    vec![
        (
            "numbers 2 and 3 swapped",
            Box::new(|page: &mut Value| {
                page["items"][1]["sequence"] = json!(3);
                page["items"][2]["sequence"] = json!(2);
            }),
        ),
        (
            "an ordering key changed",
            Box::new(|page: &mut Value| page["items"][0]["ordering_key"] = json!("pay_2")),
        ),
        (
            "an ordering key added",
            Box::new(|page: &mut Value| page["items"][1]["ordering_key"] = json!("pay_1")),
        ),
        (
            "an ordering key removed",
            Box::new(|page: &mut Value| {
                page["items"][2]
                    .as_object_mut()
                    .unwrap()
                    .remove("ordering_key");
            }),
        ),
        (
            "a mac stripped",
            Box::new(|page: &mut Value| {
                page["items"][2].as_object_mut().unwrap().remove("mac");
            }),
        ),
        (
            "a mac of another item",
            Box::new(|page: &mut Value| page["items"][0]["mac"] = page["items"][1]["mac"].clone()),
        ),
        (
            "an event id changed",
            Box::new(|page: &mut Value| {
                page["items"][0]["event_id"] = page["items"][1]["event_id"].clone();
            }),
        ),
        (
            "a body changed",
            Box::new(|page: &mut Value| page["items"][0]["body"] = json!("{}")),
        ),
        (
            "another endpoint named",
            Box::new(|page: &mut Value| {
                page["endpoint_id"] = json!("ep_0000000000000000000000000000dead");
            }),
        ),
        (
            // Below a receiver's checkpoint, a latest reads as a reset of the sender.
            "the latest number lowered",
            Box::new(|page: &mut Value| page["latest"] = json!(1)),
        ),
        (
            "the page's mac stripped",
            Box::new(|page: &mut Value| {
                page.as_object_mut().unwrap().remove("mac");
            }),
        ),
        (
            // A 410 moves the checkpoint to just before its `earliest`.
            "a 410 claiming everything was purged",
            Box::new(|page: &mut Value| {
                *page = json!({
                    "__status": 410, "error": "sequence_purged",
                    "message": "purged", "earliest": u64::MAX
                });
            }),
        ),
        (
            "a 410 carrying the page's mac",
            Box::new(|page: &mut Value| {
                let mac = page["mac"].clone();
                *page = json!({
                    "__status": 410, "error": "sequence_purged",
                    "message": "purged", "earliest": 4, "mac": mac
                });
            }),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_altered_on_the_way_is_refused_whole() {
    let feed = feed_of_three().await;
    let proxy = Proxy::start(&feed.base).await;
    let token = feed
        .client
        .create_feed_token(&feed.endpoint.as_str().into())
        .await
        .unwrap()
        .token;
    let credentials = [
        ("secret", credential(&feed.secret)),
        ("token", Credential::Token(token.clone())),
    ];
    for (name, credential) in credentials {
        // Through no proxy, and through the proxy altering nothing: the page as served.
        let direct = FeedClient::new(&feed.base, credential.clone()).unwrap();
        let through = FeedClient::new(&proxy.base, credential).unwrap();
        let served = page(&direct, &feed.endpoint).await.unwrap();
        let keys: Vec<Option<&str>> = served
            .items
            .iter()
            .map(|item| item.ordering_key.as_deref())
            .collect();
        assert_eq!(keys, [Some("pay_1"), None, Some("pay_1")], "{name}");
        proxy.alter(|_| {});
        let passed = page(&through, &feed.endpoint).await.unwrap();
        let numbers: Vec<u64> = passed.items.iter().map(|item| item.sequence).collect();
        assert_eq!(numbers, [1, 2, 3], "{name}");

        for (forgery, alter) in forgeries() {
            proxy.alter(alter);
            let error = page(&through, &feed.endpoint).await.unwrap_err();
            assert_eq!(error.code(), "forged", "{name}, {forgery}: {error}");
            let message = error.to_string();
            assert!(
                !message.contains(&feed.secret) && !message.contains(&token),
                "{message}"
            );
            // The same page, unaltered, still reads.
            assert_eq!(
                page(&direct, &feed.endpoint).await.unwrap().items.len(),
                3,
                "{name}, {forgery}"
            );
        }
    }
    proxy.stop().await;
    feed.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_page_reaches_no_handler_and_the_true_one_does() {
    let feed = feed_of_three().await;
    let proxy = Proxy::start(&feed.base).await;
    let forging = Arc::new(AtomicBool::new(true));
    let on = forging.clone();
    proxy.alter(move |page| {
        let items = page["items"].as_array_mut().unwrap();
        if on.load(Ordering::SeqCst) && items.len() == 3 {
            items[1]["sequence"] = json!(3);
            items[2]["sequence"] = json!(2);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = CatchUpConfig::new(&proxy.base, credential(&feed.secret))
        .with_interval(Duration::from_secs(3600))
        .endpoint(&feed.endpoint);
    let app = start_app(&dir.path().join("receiver.db"), &feed.secret, config).await;

    let error = app.catch_up.catch_up(&feed.endpoint).await.unwrap_err();
    assert_eq!(error.code(), "forged", "{error}");
    assert_eq!(
        app.handled().await,
        (0, 0),
        "a forged page reached the handler"
    );
    assert_eq!(
        app.store.checkpoint(&feed.endpoint).await.unwrap().sequence,
        0
    );

    forging.store(false, Ordering::SeqCst);
    app.catch_up.catch_up(&feed.endpoint).await.unwrap();
    app.wait_handled(3).await;
    assert_eq!(
        app.store.checkpoint(&feed.endpoint).await.unwrap().sequence,
        3
    );
    app.stop().await;
    proxy.stop().await;
    feed.server.shutdown().await;
}

#[test]
fn the_feed_is_read_over_https_or_on_this_machine_only() {
    let credential = || Credential::Token("kxpft_test".to_owned());
    for base in [
        "https://webhooks.platform.example",
        "https://203.0.113.7:8443/kxp/",
        "http://127.0.0.1:1",
        "http://127.5.6.7",
        "http://[::1]:1",
        "http://localhost:1",
        "http://LocalHost",
    ] {
        FeedClient::new(base, credential()).unwrap_or_else(|e| panic!("{base}: {e}"));
    }
    // Refused at construction: nothing is connected to (none of these hosts is reached).
    for (base, host) in [
        ("http://example.com", "example.com"),
        (
            "http://user:hunter2@example.com/feed?key=s3cret",
            "example.com",
        ),
        ("http://10.0.0.1:8080", "10.0.0.1"),
        ("http://[::ffff:127.0.0.1]", "[::ffff:7f00:1]"),
        ("http://localhost.example.com", "localhost.example.com"),
        ("http://127.0.0.1.example.com", "127.0.0.1.example.com"),
        ("ftp://127.0.0.1", "127.0.0.1"),
    ] {
        let error = FeedClient::new(base, credential()).unwrap_err();
        assert_eq!(error.code(), "insecure_url", "{base}: {error}");
        let message = error.to_string();
        assert!(message.contains("https://"), "{message}");
        assert!(message.contains(&format!("{host:?}")), "{message}");
        assert!(
            !message.contains("hunter2") && !message.contains("s3cret"),
            "{message}"
        );
    }
    for base in ["", "webhooks.platform.example", "https://user:hunter2@[::1"] {
        let error = FeedClient::new(base, credential()).unwrap_err();
        assert_eq!(error.code(), "invalid_url", "{base:?}: {error}");
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }
}

/// A true 410 (retention purged the numbers asked for) passes: its `earliest` is MACed for
/// the `after` it answers, and the catch-up moves on from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_true_410_is_read_as_purged() {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = sender(dir.path()).await;
    let base = format!("http://{}", server.addr());
    let (url, receiver) =
        crate::serve(axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" })))
            .await;
    let (endpoint, secret) = register(&client, &url).await;
    for n in 1..=3 {
        let event = crate::emit(&client, n).await;
        crate::wait_status(&client, &event, "delivered").await;
    }
    let purged = server
        .db()
        .purge(kxp_sender::Retention::until(Some(i64::MAX / 2)))
        .await
        .unwrap();
    assert_eq!(purged.deliveries, 3);
    let feed = FeedClient::new(&base, credential(&secret)).unwrap();
    let answer = loop {
        match feed.page(&endpoint, 0, 10).await {
            Err(FeedError::RateLimited(wait)) => tokio::time::sleep(wait).await,
            other => break other.unwrap(),
        }
    };
    assert_eq!(answer, Answer::Purged { earliest: 4 });
    receiver.abort();
    server.shutdown().await;
}
