//! A full disk under a receiver's SQLite store (in-transaction mode), then space again: while
//! it is full deliveries get 503 (never a 200 for an event not recorded); once there is space,
//! deliveries are processed again within seconds, without a restart, each event once.
//!
//! The store sits on a 4 MiB tmpfs of the receiver's own (`kxp_testkit::confine`). Where that
//! is not permitted (not root), the test says so and passes.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kxp_testkit::confine::{Confined, Tmpfs};
use kxp_testkit::conformance::{SECRET, event_body, sign};

use crate::binaries::{Bin, TempDir};

/// A receiver on a 4 MiB tmpfs of its own, with the outcomes it logs.
struct Receiver {
    _process: Confined,
    disk: Tmpfs,
    _dir: TempDir,
    url: String,
    /// `outcome` of each logged request, by event id.
    outcomes: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

impl Receiver {
    fn start(bin: Bin) -> Receiver {
        let dir = TempDir::new();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let mut command = Command::new(bin.path());
        command
            .env("KXP_LISTEN", &listen)
            .env("KXP_WEBHOOK_SECRET", SECRET)
            .env(
                "DATABASE_URL",
                format!("sqlite://{}/receiver.db", dir.path().display()),
            )
            .env("RUST_LOG", "info");
        let disk = Tmpfs::mount(dir.path(), "4m");
        let mut process = disk.spawn(&command, Stdio::piped());
        let outcomes: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let stdout = process.child().stdout.take().unwrap();
        let log = Arc::clone(&outcomes);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(fields) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                if let (Some(id), Some(outcome)) =
                    (fields["event_id"].as_str(), fields["outcome"].as_str())
                    && !id.is_empty()
                {
                    log.lock()
                        .unwrap()
                        .entry(id.to_owned())
                        .or_default()
                        .push(outcome.to_owned());
                }
            }
        });
        let started = Instant::now();
        while std::net::TcpStream::connect(&listen).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{bin:?} did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Receiver {
            _process: process,
            disk,
            _dir: dir,
            url: format!("http://{listen}/webhooks"),
            outcomes,
        }
    }

    /// The logged outcomes of `event_id`'s requests so far.
    fn outcomes_of(&self, event_id: &str) -> Vec<String> {
        self.outcomes
            .lock()
            .unwrap()
            .get(event_id)
            .cloned()
            .unwrap_or_default()
    }
}

async fn deliver(url: &str, event_id: &str) -> u16 {
    let body = event_body(event_id, 1999, "EUR");
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("x-kxp-signature", sign(&[SECRET], t, body.as_bytes()))
        .body(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

async fn a_full_disk_gets_503s_then_recovers_without_a_restart(bin: Bin) {
    if !Tmpfs::permitted("disk full") {
        return;
    }
    let receiver = Receiver::start(bin);
    let mut answered_200 = Vec::new();
    for n in 0..5 {
        let id = format!("evt_before_{n}");
        assert_eq!(deliver(&receiver.url, &id).await, 200, "{id}");
        answered_200.push(id);
    }

    receiver.disk.fill();
    let mut during = Vec::new();
    for n in 0..20 {
        let id = format!("evt_full_{n}");
        let status = deliver(&receiver.url, &id).await;
        assert!(
            status == 200 || status == 503,
            "{id}: {status} while the disk is full"
        );
        if status == 200 {
            answered_200.push(id.clone());
        }
        during.push((id, status));
    }
    assert!(
        during.iter().any(|(_, status)| *status == 503),
        "a full disk refused nothing: the test did not fill it"
    );

    receiver.disk.free();
    let started = Instant::now();
    let mut n = 0;
    loop {
        let id = format!("evt_after_{n}");
        n += 1;
        if deliver(&receiver.url, &id).await == 200 {
            answered_200.push(id);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{bin:?} still refuses deliveries 30 s after the disk was freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // From then on every delivery is processed: no pooled connection stayed broken. The sender
    // delivers the refused ones again; they are processed now.
    for k in 0..20 {
        let id = format!("evt_later_{k}");
        assert_eq!(
            deliver(&receiver.url, &id).await,
            200,
            "{id} after recovery"
        );
        answered_200.push(id);
    }
    for (id, status) in &during {
        if *status == 503 {
            assert_eq!(
                deliver(&receiver.url, id).await,
                200,
                "{id} delivered again"
            );
            answered_200.push(id.clone());
        }
    }
    // Everything answered 200 was recorded: delivered once more, each is a duplicate, and each
    // was processed exactly once.
    for id in &answered_200 {
        assert_eq!(deliver(&receiver.url, id).await, 200, "{id} once more");
    }
    let started = Instant::now();
    for id in &answered_200 {
        loop {
            let outcomes = receiver.outcomes_of(id);
            if outcomes.last().map(String::as_str) == Some("duplicate") {
                let processed = outcomes.iter().filter(|o| *o == "processed").count();
                assert_eq!(processed, 1, "{id}: {outcomes:?}");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{id}: {outcomes:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

both_binaries!(a_full_disk_gets_503s_then_recovers_without_a_restart);
