//! `kxp listen` as a merchant runs it on a laptop: a real `kxp serve` process, `kxp listen`
//! forwarding to a local kxp-axum receiver started with the secret it printed. The receiver is
//! down at first, the sender is killed and restarted midway: all 100 events arrive, verified,
//! in sequence order, none twice; Ctrl-C deletes the temporary endpoint.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
use kxp_verify::Verifier;
use serde_json::{Value, json};

use crate::crash::{KEY, Serve};

const PATIENCE: Duration = Duration::from_secs(90);

/// Lines a child wrote, collected by a thread.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    fn collect(&self, stream: impl Read + Send + 'static) {
        let lines = self.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// The temporary endpoint's id, from `kxp listen`'s `Ready: …` line.
fn endpoint_of(ready: &str) -> String {
    let (_, rest) = ready.split_once("(endpoint ").unwrap();
    rest.split(';').next().unwrap().to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The local receiver: kxp-axum's layer verifies each request with `secret`; the handler
/// writes down the event ids in the order they come.
async fn local_receiver(port: u16, secret: &str, seen: Arc<Mutex<Vec<String>>>) {
    async fn webhook(State(seen): State<Arc<Mutex<Vec<String>>>>, event: VerifiedEvent) {
        // A little work, so that the sender's restart lands mid-stream.
        tokio::time::sleep(Duration::from_millis(10)).await;
        seen.lock().unwrap().push(event.id().to_owned());
    }
    let verify = VerifyLayer::new(Receiver::new(Verifier::from_secret_list(secret).unwrap()));
    let app = Router::new()
        .route("/webhooks", post(webhook).layer(verify))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kxp_listen_forwards_every_event_in_order_across_a_receiver_outage_and_a_sender_restart() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let kxp = env!("CARGO_BIN_EXE_kxp");
    let port = free_port();
    let mut serve = Serve::start_at(kxp, &database, &["--migrate"], port);
    let api = kxp_api::Client::new(&serve.base, KEY).unwrap();
    let receiver_port = free_port();
    let mut listen: Child = Command::new(kxp)
        .args([
            "listen",
            "--json",
            "--api-key",
            KEY,
            "--api-url",
            &serve.base,
        ])
        .args([
            "--forward-to",
            &format!("http://127.0.0.1:{receiver_port}/webhooks"),
        ])
        .args(["--events", "payment.*"])
        .env_remove("KXP_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, stderr) = (Lines::default(), Lines::default());
    stdout.collect(listen.stdout.take().unwrap());
    stderr.collect(listen.stderr.take().unwrap());
    until("kxp listen printed no secret", || stdout.all().len() >= 2).await;
    let first = stdout.all();
    let secret = first[0]
        .strip_prefix("Signing secret: ")
        .unwrap()
        .to_owned();
    assert!(
        first[1].starts_with("Ready: forwarding payment.* to http://127.0.0.1:"),
        "{first:?}"
    );
    let endpoint = endpoint_of(&first[1]);

    let emit = async |n: usize| {
        let event = kxp_api::NewEvent::new("payment.succeeded", &json!({"n": n})).unwrap();
        api.create_event(&event, None)
            .await
            .unwrap()
            .id
            .into_string()
    };
    let mut events = Vec::new();
    // The local receiver is not up yet: each try is printed, and tried again. An event of
    // another type is not forwarded at all.
    for n in 0..10 {
        events.push(emit(n).await);
    }
    let other = kxp_api::NewEvent::new("refund.created", &json!({})).unwrap();
    api.create_event(&other, None).await.unwrap();
    let refused = |lines: &[String]| {
        lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["error"] == "connection_refused")
            .count()
    };
    until("no refused try was printed", || refused(&stdout.all()) >= 2).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    local_receiver(receiver_port, &secret, seen.clone()).await;
    until("the first events did not arrive", || {
        seen.lock().unwrap().len() >= 10
    })
    .await;

    // The sender is killed while events flow, and restarted at the same address.
    for n in 10..60 {
        events.push(emit(n).await);
    }
    until("no event of the second batch arrived", || {
        seen.lock().unwrap().len() >= 20
    })
    .await;
    drop(serve);
    tokio::time::sleep(Duration::from_millis(300)).await;
    serve = Serve::start_at(kxp, &database, &[], port);
    for n in 60..100 {
        events.push(emit(n).await);
    }
    until("not every event arrived", || {
        seen.lock().unwrap().len() >= 100
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let arrived = seen.lock().unwrap().clone();
    assert_eq!(arrived, events, "every event once, in sequence order");

    let lines: Vec<Value> = stdout
        .all()
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let delivered: Vec<&Value> = lines.iter().filter(|l| l["status"] == 200).collect();
    assert_eq!(delivered.len(), 100, "{lines:?}");
    assert!(
        delivered
            .iter()
            .all(|l| l["type"] == "payment.succeeded" && l["error"].is_null())
    );

    // Ctrl-C: exits 0, having deleted its endpoint.
    let sent = Command::new("kill")
        .args(["-INT", &listen.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = listen.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < PATIENCE, "kxp listen did not stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}; stderr: {:?}", stderr.all());
    let gone = api.endpoint(&endpoint.as_str().into()).await.unwrap_err();
    assert!(gone.to_string().contains("404"), "{gone}");
    assert!(
        stderr
            .all()
            .iter()
            .any(|l| l.contains("Deleted the temporary endpoint"))
    );
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_retry_an_event_the_local_receiver_refuses_is_skipped_and_committed() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("kxp.db").display());
    let kxp = env!("CARGO_BIN_EXE_kxp");
    let serve = Serve::start_at(kxp, &database, &["--migrate"], free_port());
    let api = kxp_api::Client::new(&serve.base, KEY).unwrap();
    // Nothing listens there.
    let nowhere = format!("http://127.0.0.1:{}/webhooks", free_port());
    let mut listen = Command::new(kxp)
        .args(["listen", "--json", "--no-retry", "--api-url", &serve.base])
        .args(["--forward-to", &nowhere])
        .env("KXP_API_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = Lines::default();
    stdout.collect(listen.stdout.take().unwrap());
    until("kxp listen is not ready", || stdout.all().len() >= 2).await;
    let endpoint = endpoint_of(&stdout.all()[1]);
    for n in 0..3 {
        let event = kxp_api::NewEvent::new("payment.succeeded", &json!({"n": n})).unwrap();
        api.create_event(&event, None).await.unwrap();
    }
    let tries = || -> Vec<Value> {
        stdout
            .all()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    until("not every event was tried", || tries().len() >= 3).await;
    let start = Instant::now();
    loop {
        let health = api
            .endpoint_health(&endpoint.as_str().into())
            .await
            .unwrap();
        if health.pull.unwrap().cursor == 3 {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "not committed past the refused events"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tries = tries();
    assert_eq!(tries.len(), 3, "each tried once: {tries:?}");
    assert!(
        tries
            .iter()
            .all(|t| t["error"] == "connection_refused" && t["status"].is_null())
    );
    let _ = listen.kill();
    let _ = listen.wait();
}
