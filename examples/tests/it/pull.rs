//! The pull receiver as a merchant behind a firewall runs it: the binary, a real sender in the
//! test's process, a pull endpoint, the settings in the environment. It is killed (SIGKILL)
//! midway through 1,000 payments and started again: each is recorded once, and the cursor
//! ends at the last.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::binaries::{TempDir, sender, sqlite_payments};

/// Generous: a loaded 2-core CI machine runs this beside other test binaries.
const PATIENCE: Duration = Duration::from_secs(120);

const EVENTS: usize = 1000;

/// The pull receiver, started in `dir` with only `env`; its stderr goes to `stderr.log` there.
fn start(dir: &TempDir, env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pull-receiver"))
        .current_dir(dir.path())
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap()
}

/// Waits until `done`, failing if the receiver exits first or it takes over [`PATIENCE`]
/// since `started`.
async fn until(
    receiver: &mut Child,
    dir: &TempDir,
    started: Instant,
    mut done: impl AsyncFnMut() -> bool,
) {
    while !done().await {
        assert!(
            receiver.try_wait().unwrap().is_none(),
            "the pull receiver exited; stderr:\n{}",
            stderr(dir)
        );
        assert!(
            started.elapsed() < PATIENCE,
            "no progress; stderr:\n{}",
            stderr(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stderr(dir: &TempDir) -> String {
    std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pull_receiver_records_each_payment_once_across_a_sigkill() {
    let sender_dir = TempDir::new();
    let (sender, base, client) = sender(&sender_dir).await;
    let created = client
        .create_endpoint(&kxp_api::NewEndpoint::pull())
        .await
        .unwrap();
    let endpoint = created.endpoint.id.as_str().to_owned();
    let secret = created.secret.unwrap().expose().to_owned();

    let dir = TempDir::new();
    let db = dir.default_database();
    let env = [
        ("KXP_WEBHOOK_SECRET", secret.as_str()),
        ("KXP_SENDER_URL", base.as_str()),
        ("KXP_ENDPOINT_ID", endpoint.as_str()),
        ("DATABASE_URL", db.as_str()),
        // A little work per payment, so the kill lands mid-stream.
        ("KXP_EXAMPLE_SLOW_MS", "3"),
    ];
    let mut receiver = start(&dir, &env);
    let mut events = Vec::with_capacity(EVENTS);
    for n in 0..EVENTS {
        let data = json!({"amount": n, "currency": "eur"});
        let event = kxp_api::NewEvent::new("payment.succeeded", &data).unwrap();
        events.push(
            client
                .create_event(&event, None)
                .await
                .unwrap()
                .id
                .into_string(),
        );
    }

    // Killed once it has recorded some, with no chance to commit what it was doing.
    let started = Instant::now();
    until(&mut receiver, &dir, started, async || {
        sqlite_payments(&db).await.len() >= EVENTS / 4
    })
    .await;
    receiver.kill().unwrap();
    receiver.wait().unwrap();
    let at_kill = sqlite_payments(&db).await.len();
    assert!(
        at_kill < EVENTS,
        "it finished before the kill: nothing was tested"
    );

    let mut receiver = start(&dir, &env);
    let health = async || {
        client
            .endpoint_health(&endpoint.as_str().into())
            .await
            .unwrap()
            .pull
            .unwrap()
    };
    until(&mut receiver, &dir, started, async || {
        health().await.cursor >= EVENTS as u64
    })
    .await;
    let pull = health().await;
    assert_eq!((pull.cursor, pull.latest, pull.lag), (1000, 1000, 0));
    let payments = sqlite_payments(&db).await;
    let mut recorded: Vec<String> = payments.into_iter().map(|(id, _, _)| id).collect();
    assert_eq!(
        recorded.len(),
        EVENTS,
        "each payment once (killed at {at_kill})"
    );
    recorded.sort();
    events.sort();
    assert_eq!(recorded, events);

    // SIGTERM ends it cleanly, mid long poll.
    let sent = Command::new("kill")
        .args(["-TERM", &receiver.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = loop {
        if let Some(status) = receiver.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < PATIENCE, "still running after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}; stderr:\n{}", stderr(&dir));
    sender.shutdown().await;
}

#[tokio::test]
async fn the_pull_receiver_without_its_endpoint_exits_with_a_clear_message() {
    let dir = TempDir::new();
    let mut child = start(
        &dir,
        &[
            ("KXP_WEBHOOK_SECRET", "whsec_example"),
            ("KXP_SENDER_URL", "http://127.0.0.1:9"),
        ],
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{status}");
    assert!(stderr(&dir).contains("KXP_ENDPOINT_ID"), "{}", stderr(&dir));
}
