//! `kxp dlq` and `kxp replay`, run as real processes against a running sender and against its
//! database directly.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::{Receiver, Reply, sender};

fn kxp(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kxp"))
        .args(args)
        .env_remove("KXP_API_KEY")
        .env_remove("KXP_DATABASE_URL")
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_queue_is_listed_and_replayed_from_the_command_line() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![Reply::Status(500); 2]).await;
    let (endpoint_id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let first = s.api.emit("payment.failed", json!({"n": 1})).await;
    let second = s.api.emit("payment.failed", json!({"n": 2})).await;
    let dead = s
        .api
        .wait_for(&first, "dead", Duration::from_secs(10))
        .await;
    s.api
        .wait_for(&second, "dead", Duration::from_secs(10))
        .await;
    let server = s.api.base.clone();
    let dead_id = dead["id"].as_str().unwrap().to_owned();

    let (code, out, err) = tokio::task::spawn_blocking({
        let server = server.clone();
        move || {
            kxp(&[
                "dlq",
                "--server",
                &server,
                "--api-key",
                "kxp_test_key",
                "--json",
            ])
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let listed: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .all(|d| d["status"] == "dead" && d["endpoint_id"] == endpoint_id.as_str())
    );

    let (code, out, err) = tokio::task::spawn_blocking({
        let (server, dead_id) = (server.clone(), dead_id.clone());
        move || {
            kxp(&[
                "replay",
                &dead_id,
                "--server",
                &server,
                "--api-key",
                "kxp_test_key",
            ])
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&first), "{out}");
    s.api
        .wait_for(&first, "delivered", Duration::from_secs(10))
        .await;

    // Straight on the database, while the server runs (SQLite in WAL mode allows it).
    let db_url = database_url(&s);
    let (code, out, err) = tokio::task::spawn_blocking({
        let (db_url, endpoint_id) = (db_url.clone(), endpoint_id.clone());
        move || {
            kxp(&[
                "replay",
                "--endpoint",
                &endpoint_id,
                "--database-url",
                &db_url,
                "--api-key",
                "kxp_test_key",
            ])
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Queued 1 "), "{out}");
    s.api
        .wait_for(&second, "delivered", Duration::from_secs(10))
        .await;

    let (code, out, _) = tokio::task::spawn_blocking(move || {
        kxp(&[
            "dlq",
            "--database-url",
            &db_url,
            "--api-key",
            "kxp_test_key",
        ])
    })
    .await
    .unwrap();
    assert_eq!((code, out.trim()), (0, "The dead-letter queue is empty."));

    let (code, _, err) = tokio::task::spawn_blocking(move || {
        kxp(&["dlq", "--server", &server, "--api-key", "kxp_wrong"])
    })
    .await
    .unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");
    s.server.shutdown().await;
}

#[test]
fn replay_needs_a_delivery_or_an_endpoint() {
    let (code, _, err) = kxp(&["replay", "--api-key", "k"]);
    assert_eq!(code, 2, "{err}");
}

fn database_url(s: &crate::support::Sender) -> String {
    s.database_url.clone()
}
