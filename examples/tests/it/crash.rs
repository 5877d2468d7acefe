//! A receiver killed while it processes an event loses nothing and records nothing twice:
//! in-transaction mode rolls the unfinished attempt back, and the next delivery processes it.

use std::time::{Duration, Instant};

use kxp_dedup::sqlx::sqlite::SqliteConnectOptions;
use kxp_dedup::sqlx::{self, ConnectOptions, Connection};

use crate::process::{Bin, Running, SECRET, TempDir, deliver, payment_event, sqlite_payments};

both_binaries!(killed_mid_processing_the_event_is_recorded_once_after_a_restart);

/// Waits until another connection holds the database's write lock, which the receiver's
/// `BEGIN IMMEDIATE` takes for the whole of its transaction: the request is then inside it.
async fn wait_for_a_write_transaction(url: &str) {
    let options: SqliteConnectOptions = url.parse().unwrap();
    let mut probe = options
        .busy_timeout(Duration::ZERO)
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        match sqlx::query("BEGIN IMMEDIATE").execute(&mut probe).await {
            // SQLITE_BUSY: somebody else holds the write lock. Any other error is a failure,
            // not a sign that the request got in.
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("5") => break,
            Err(error) => panic!("probing the write lock: {error}"),
            Ok(_) => {
                sqlx::query("ROLLBACK").execute(&mut probe).await.unwrap();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the request never started its transaction"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    probe.close().await.unwrap();
}

async fn killed_mid_processing_the_event_is_recorded_once_after_a_restart(bin: Bin) {
    let dir = TempDir::new();
    let database = dir.default_database();
    let mut receiver = Running::start(
        bin,
        dir.path(),
        &[
            ("KXP_WEBHOOK_SECRET", SECRET),
            ("KXP_EXAMPLE_SLOW_MS", "3000"),
        ],
    )
    .await;
    let (id, body) = payment_event(4200, "eur");

    let url = receiver.url.clone();
    let in_flight = {
        let body = body.clone();
        tokio::spawn(async move { deliver(&url, SECRET, &body).await })
    };
    wait_for_a_write_transaction(&database).await;
    receiver.kill();
    // The sender never got an answer, so it will deliver again.
    assert!(in_flight.await.is_err(), "the killed request was answered");
    assert!(sqlite_payments(&database).await.is_empty());

    let receiver = Running::start(bin, dir.path(), &[("KXP_WEBHOOK_SECRET", SECRET)]).await;
    let (status, answer) = deliver(&receiver.url, SECRET, &body).await;
    // "processed", not "duplicate": the killed attempt's mark rolled back with its row.
    assert_eq!(
        (status, answer.as_str()),
        (200, r#"{"outcome":"processed"}"#)
    );
    assert_eq!(deliver(&receiver.url, SECRET, &body).await.0, 200);
    assert_eq!(
        sqlite_payments(&database).await,
        [(id, Some(4200), Some("eur".to_owned()))]
    );
}
