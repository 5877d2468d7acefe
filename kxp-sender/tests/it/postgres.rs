//! What only PostgreSQL does, on a fresh database (skipped loudly without
//! `KXP_TEST_DATABASE_URL`): processes that share one database and announce work to each other,
//! the database's clock, and group commit racing on an idempotency key. The scenarios that run
//! on every backend are instantiated by `each_backend!` in the files of their subject.

use std::time::Duration;

use kxp_sender::Db;
use kxp_testkit::db::PgDatabase;
use serde_json::json;

use crate::support::{Receiver, sender_with};

#[tokio::test]
async fn an_api_only_process_announces_new_work_to_the_workers_on_postgresql() {
    let Some(database) = PgDatabase::create("kxp_sender_announce").await else {
        return;
    };
    // The worker process scans for due work once at start and then only every minute: within
    // the test's wait, only the announcement can bring it the event.
    let url = database.url().to_owned();
    let workers = sender_with("0s", move |c| {
        c.database_url = url;
        c.poll_interval = Duration::from_secs(60);
    })
    .await;
    let url = database.url().to_owned();
    let api = sender_with("0s", move |c| {
        c.database_url = url;
        c.run_workers = false;
    })
    .await;
    let receiver = Receiver::start(Vec::new()).await;
    api.api.endpoint(&receiver.url, json!({})).await;
    // Past the workers' first scan.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in 0..3 {
        let event_id = api.api.emit("t", json!({"n": n})).await;
        api.api
            .wait_for(&event_id, "delivered", Duration::from_secs(20))
            .await;
    }
    assert_eq!(receiver.seen().len(), 3);
    drop(workers);
}

#[tokio::test]
async fn the_database_clock_is_read_on_postgresql_and_not_on_sqlite() {
    let Some(database) = PgDatabase::create("kxp_sender_clock").await else {
        return;
    };
    let db = kxp_sender::Db::connect(database.url()).await.unwrap();
    // The same machine here: the offset is the reading's own error, well under a second.
    let offset = db
        .clock_offset()
        .await
        .expect("PostgreSQL's clock is readable");
    assert!(
        offset.abs() < 1000,
        "offset {offset} ms to a server on this machine"
    );
    db.close().await;

    let dir = tempfile::tempdir().unwrap();
    let sqlite =
        kxp_sender::Db::connect(&format!("sqlite://{}", dir.path().join("c.db").display()))
            .await
            .unwrap();
    assert_eq!(
        sqlite.clock_offset().await,
        None,
        "SQLite's clock is this machine's"
    );
    sqlite.close().await;
}

/// Ingestion on PostgreSQL is by group commit, several batches at once: requests racing on one
/// new idempotency key land in different batches, and the losers' batches are refused by the
/// unique index. Their items are then written one by one, so the racers all get the one event
/// and the requests that shared a refused batch get their own. A trigger holds each racing
/// insert for 200 ms, so the first batch is still open when the next ones insert the same key:
/// the refusal happens every round rather than by chance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_idempotent_requests_share_one_event_and_spare_their_batch_on_postgresql() {
    let Some(database) = PgDatabase::create("kxp_sender_ingest_race").await else {
        return;
    };
    let url = database.url().to_owned();
    let s = sender_with("0s", move |c| c.database_url = url).await;
    let (Db::Postgres(pool) | Db::Citus(pool)) = s.server.db() else {
        panic!("the sender runs on PostgreSQL");
    };
    sqlx::raw_sql(
        "CREATE FUNCTION test_slow_race() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_sleep(0.2); RETURN NEW; END $$; \
         CREATE TRIGGER test_slow_race BEFORE INSERT ON kxp_events FOR EACH ROW \
         WHEN (NEW.idempotency_key LIKE 'race-%') EXECUTE FUNCTION test_slow_race();",
    )
    .execute(pool)
    .await
    .unwrap();
    let post = |key: String, n: usize| {
        let request = s
            .api
            .http
            .post(format!("{}/v1/events", s.api.base))
            .bearer_auth(&s.api.key)
            .header("Idempotency-Key", key)
            .json(&json!({"type": "t", "data": {"n": n}}));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap();
            (status, body["id"].as_str().unwrap_or_default().to_owned())
        }
    };
    for round in 0..3 {
        // Each round: 24 requests with one new key (same body), 24 with keys of their own.
        let racing = (0..24).map(|_| post(format!("race-{round}"), 0));
        let alone = (0..24).map(|n| post(format!("alone-{round}-{n}"), n + 1));
        let running: Vec<_> = racing.chain(alone).map(tokio::spawn).collect();
        let mut answers = Vec::new();
        for answer in running {
            answers.push(answer.await.unwrap());
        }
        let (raced, own) = answers.split_at(24);
        assert!(
            answers.iter().all(|(status, _)| *status == 202),
            "round {round}: {answers:?}"
        );
        let mut one: Vec<&String> = raced.iter().map(|(_, id)| id).collect();
        one.dedup();
        assert_eq!(one.len(), 1, "round {round}: the racers got {one:?}");
        let mut distinct: Vec<&String> = own.iter().map(|(_, id)| id).collect();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 24, "round {round}: each key its own event");
        assert!(!distinct.contains(&one[0]), "round {round}");
    }
    s.server.shutdown().await;
    database.drop().await;
}
