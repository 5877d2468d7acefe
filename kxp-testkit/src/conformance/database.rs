//! What the suite does to a receiver's database from outside: take it down, and see a request
//! inside its transaction.

use std::time::{Duration, Instant};

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection, SqliteConnection};

use crate::db::TestDatabase;

/// How long the suite waits for something a receiver does on its own (a line in a pipe, a
/// transaction to start) before it fails the test. Generous: CI machines are loaded.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// The database made unusable for the receiver, until [`Outage::end`].
///
/// - SQLite: the suite holds the write lock (`BEGIN IMMEDIATE` on a connection of its own), so
///   every write of the receiver waits its busy timeout out and fails with `SQLITE_BUSY`.
/// - PostgreSQL: the database refuses new connections (`ALLOW_CONNECTIONS false`) and the
///   receiver's open ones are terminated, as when the server restarts or the network drops.
#[derive(Debug)]
pub struct Outage {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Sqlite(SqliteConnection),
    Postgres { admin_url: String, name: String },
}

impl Outage {
    /// Takes `database` down for its receivers.
    pub async fn begin(database: &TestDatabase) -> Outage {
        let inner = match database {
            TestDatabase::Sqlite(file) => {
                let options: SqliteConnectOptions = file
                    .url()
                    .parse()
                    .unwrap_or_else(|e| panic!("bad SQLite URL: {e}"));
                let mut conn = options
                    .busy_timeout(PATIENCE)
                    .connect()
                    .await
                    .unwrap_or_else(|e| panic!("cannot open the SQLite file: {e}"));
                sqlx::query("BEGIN IMMEDIATE")
                    .execute(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("cannot take the write lock: {e}"));
                Inner::Sqlite(conn)
            }
            TestDatabase::Postgres(db) => {
                let (admin_url, name) = (db.admin_url().to_owned(), db.name().to_owned());
                let mut admin = admin(&admin_url).await;
                for sql in [
                    format!(r#"ALTER DATABASE "{name}" ALLOW_CONNECTIONS false"#),
                    format!(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = '{name}' AND pid <> pg_backend_pid()"
                    ),
                ] {
                    sqlx::query(&sql)
                        .execute(&mut admin)
                        .await
                        .unwrap_or_else(|e| panic!("{sql}: {e}"));
                }
                let _ = admin.close().await;
                Inner::Postgres { admin_url, name }
            }
        };
        Outage { inner }
    }

    /// Brings the database back.
    pub async fn end(self) {
        match self.inner {
            Inner::Sqlite(mut conn) => {
                sqlx::query("ROLLBACK")
                    .execute(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("cannot release the write lock: {e}"));
                let _ = conn.close().await;
            }
            Inner::Postgres { admin_url, name } => {
                let mut admin = admin(&admin_url).await;
                let sql = format!(r#"ALTER DATABASE "{name}" ALLOW_CONNECTIONS true"#);
                sqlx::query(&sql)
                    .execute(&mut admin)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                let _ = admin.close().await;
            }
        }
    }
}

async fn admin(url: &str) -> PgConnection {
    PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the PostgreSQL server: {e}"))
}

/// Waits until some connection to `database` is inside a write transaction, which is where a
/// receiver in in-transaction mode is while its (slow) handler runs: on SQLite the write lock is
/// taken (a probe's `BEGIN IMMEDIATE` is busy); on PostgreSQL a session is `idle in
/// transaction`. Panics after 30 s.
pub async fn wait_for_open_transaction(database: &TestDatabase) {
    let started = Instant::now();
    match database {
        TestDatabase::Sqlite(file) => {
            let options: SqliteConnectOptions = file
                .url()
                .parse()
                .unwrap_or_else(|e| panic!("bad SQLite URL: {e}"));
            let mut probe = options
                .busy_timeout(Duration::ZERO)
                .connect()
                .await
                .unwrap_or_else(|e| panic!("cannot open the SQLite file: {e}"));
            loop {
                match sqlx::query("BEGIN IMMEDIATE").execute(&mut probe).await {
                    // SQLITE_BUSY: somebody else holds the write lock. Any other error is a
                    // failure, not a sign that the request got in.
                    Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("5") => {
                        break;
                    }
                    Err(error) => panic!("probing the write lock: {error}"),
                    Ok(_) => {
                        sqlx::query("ROLLBACK")
                            .execute(&mut probe)
                            .await
                            .unwrap_or_else(|e| panic!("ROLLBACK: {e}"));
                    }
                }
                assert!(
                    started.elapsed() < PATIENCE,
                    "no request started its transaction"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let _ = probe.close().await;
        }
        TestDatabase::Postgres(db) => {
            let mut admin = admin(db.admin_url()).await;
            let sql = format!(
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = '{}' AND state = 'idle in transaction'",
                db.name()
            );
            loop {
                let open: i64 = sqlx::query_scalar(&sql)
                    .fetch_one(&mut admin)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                if open > 0 {
                    break;
                }
                assert!(
                    started.elapsed() < PATIENCE,
                    "no request started its transaction"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let _ = admin.close().await;
        }
    }
}
