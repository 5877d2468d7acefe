//! The happy path on PostgreSQL: `DATABASE_URL=postgres://…` works like the SQLite default.
//! Runs when `KXP_TEST_DATABASE_URL` is set, on a fresh database; says SKIPPED otherwise.

use kxp_dedup::sqlx::{self, Connection, PgConnection};
use kxp_testkit::db::PgDatabase;

use crate::process::{Bin, PAYMENTS, Running, SECRET, TempDir, deliver, payment_event};

both_binaries!(a_signed_event_is_recorded_once_on_postgres);

async fn a_signed_event_is_recorded_once_on_postgres(bin: Bin) {
    // Dropped (with the database) also when an assertion below fails.
    let Some(database) = PgDatabase::create("kxp_examples").await else {
        return;
    };
    let url = database.url();
    let dir = TempDir::new();
    let receiver = Running::start(
        bin,
        dir.path(),
        &[("KXP_WEBHOOK_SECRET", SECRET), ("DATABASE_URL", url)],
    )
    .await;
    let (id, body) = payment_event(1999, "eur");
    for attempt in 0..6 {
        let (status, answer) = deliver(&receiver.url, SECRET, &body).await;
        let outcome = if attempt == 0 {
            "processed"
        } else {
            "duplicate"
        };
        assert_eq!(
            (status, answer),
            (200, format!(r#"{{"outcome":"{outcome}"}}"#))
        );
    }
    let mut conn = PgConnection::connect(url).await.unwrap();
    let rows: Vec<(String, Option<i64>, Option<String>)> =
        sqlx::query_as(PAYMENTS).fetch_all(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    assert_eq!(rows, [(id, Some(1999), Some("eur".to_owned()))]);
    // Nothing was written to the working directory: no stray SQLite file.
    assert!(!dir.path().join("kxp-receiver.db").exists());
    drop(receiver);
    database.drop().await;
}
