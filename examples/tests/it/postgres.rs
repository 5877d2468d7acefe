//! The happy path on PostgreSQL: `DATABASE_URL=postgres://…` works like the SQLite default.
//! Runs when `KXP_TEST_DATABASE_URL` is set, on a fresh database; says SKIPPED otherwise.

use std::io::Write;

use kxp_dedup::sqlx::{self, Connection, PgConnection};

use crate::process::{
    Bin, PAYMENTS, Running, SECRET, TempDir, deliver, payment_event, unique_name,
};

both_binaries!(a_signed_event_is_recorded_once_on_postgres);

const PG_ENV: &str = "KXP_TEST_DATABASE_URL";

/// A database created for one test on the server of [`PG_ENV`], dropped on [`PgDatabase::drop`].
struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PgDatabase {
    async fn create(admin_url: &str) -> PgDatabase {
        let name = unique_name("kxp_examples");
        let mut admin = PgConnection::connect(admin_url).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        PgDatabase {
            admin_url: admin_url.to_owned(),
            url: with_database(admin_url, &name),
            name,
        }
    }

    async fn drop(self) {
        let mut admin = PgConnection::connect(&self.admin_url).await.unwrap();
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .execute(&mut admin)
        .await
        .unwrap();
        admin.close().await.unwrap();
    }
}

/// `admin_url` with its database name replaced by `name`, query string kept.
fn with_database(admin_url: &str, name: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (admin_url, String::new()),
    };
    let authority_start = base.find("://").unwrap() + 3;
    let authority_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    format!("{}/{name}{query}", &base[..authority_end])
}

async fn a_signed_event_is_recorded_once_on_postgres(bin: Bin) {
    let Ok(admin_url) = std::env::var(PG_ENV) else {
        // Straight to stderr, not `eprintln!`: libtest captures the macro's output of a passing
        // test, and a skip nobody sees is a silent pass.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED (PostgreSQL): {PG_ENV} is not set"
        );
        return;
    };
    let database = PgDatabase::create(&admin_url).await;
    let dir = TempDir::new();
    let result = {
        let url = database.url.clone();
        // On its own task, so that a failed assertion still drops the database below.
        tokio::spawn(async move {
            let receiver = Running::start(
                bin,
                dir.path(),
                &[("KXP_WEBHOOK_SECRET", SECRET), ("DATABASE_URL", &url)],
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
            let mut conn = PgConnection::connect(&url).await.unwrap();
            let rows: Vec<(String, Option<i64>, Option<String>)> =
                sqlx::query_as(PAYMENTS).fetch_all(&mut conn).await.unwrap();
            conn.close().await.unwrap();
            assert_eq!(rows, [(id, Some(1999), Some("eur".to_owned()))]);
            // Nothing was written to the working directory: no stray SQLite file.
            assert!(!dir.path().join("kxp-receiver.db").exists());
        })
        .await
    };
    database.drop().await;
    if let Err(error) = result {
        std::panic::resume_unwind(error.into_panic());
    }
}
