//! A full disk under `kxp serve`'s SQLite store, then space again: while it is full the API
//! answers 503 and nothing acknowledged is lost; once space is back it recovers within seconds,
//! without a restart, and every acknowledged event is delivered.
//!
//! The store sits on a small tmpfs of the server's own (`kxp_testkit::confine`), so nothing
//! outside the test sees it. Where that is not permitted (not root) the test says so and passes.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kxp_testkit::confine::{Confined, Tmpfs};

use crate::crash::{KEY, create_endpoint, receiver, wait_until_all_arrive};

/// `kxp serve` on a 6 MiB tmpfs of its own, and its API's address.
fn start(dir: &std::path::Path) -> (Tmpfs, Confined, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let database_url = format!("sqlite://{}/kxp.db", dir.display());
    let mut serve = Command::new(env!("CARGO_BIN_EXE_kxp"));
    serve
        .args(["serve", "--dev", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--database-url", &database_url])
        .args(["--retry-schedule", "0s,100ms,200ms,400ms,1s,2s,5s"])
        .args(["--delivery-timeout", "1s", "--lease-extra", "500ms"])
        .env("KXP_API_KEY", KEY)
        .env("RUST_LOG", "warn");
    let tmpfs = Tmpfs::mount(dir, "6m");
    let confined = tmpfs.spawn(&serve, Stdio::null());
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "kxp serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (tmpfs, confined, format!("http://127.0.0.1:{port}"))
}

/// Emits one event: `Some(id)` when acknowledged (202), `None` when refused (any error).
async fn emit_one(client: &kxp_api::Client, n: usize) -> Option<String> {
    let event = kxp_api::NewEvent::new("payment.succeeded", &serde_json::json!({"n": n})).ok()?;
    client
        .create_event(&event, None)
        .await
        .ok()
        .map(|e| e.id.into_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_gets_503s_then_recovers_without_a_restart_and_loses_nothing() {
    if !Tmpfs::permitted("disk full") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (disk, _server, base) = start(dir.path());
    let (url, seen) = receiver().await;
    create_endpoint(&base, &url).await;
    let client = kxp_api::Client::new(&base, KEY).unwrap();

    let mut acknowledged = Vec::new();
    for n in 0..20 {
        acknowledged.push(
            emit_one(&client, n)
                .await
                .expect("accepted before the disk filled"),
        );
    }
    wait_until_all_arrive(&seen, &acknowledged, Duration::from_secs(60)).await;

    disk.fill();
    let mut refused = 0;
    for n in 20..80 {
        match emit_one(&client, n).await {
            Some(id) => acknowledged.push(id),
            None => refused += 1,
        }
    }
    assert!(
        refused > 0,
        "a full disk refused nothing: the test did not fill it"
    );

    disk.free();
    // Recovered within seconds: the first acknowledged event after the space came back...
    let started = Instant::now();
    let mut n = 80;
    loop {
        if let Some(id) = emit_one(&client, n).await {
            acknowledged.push(id);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still refusing events 30 s after the disk was freed"
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and from then on every one: no connection left poisoned by the full disk.
    let mut failed_after = 0;
    for k in 0..60 {
        match emit_one(&client, 1000 + k).await {
            Some(id) => acknowledged.push(id),
            None => failed_after += 1,
        }
    }
    assert_eq!(
        failed_after, 0,
        "refusals after recovery: some connection stayed broken"
    );
    wait_until_all_arrive(&seen, &acknowledged, Duration::from_secs(60)).await;
}
