//! The effects table of an in-process receiver in in-transaction mode: created in the dedup
//! store's database, written on the dedup transaction's connection, read back by the suite.
//! One definition for every adapter (the example binaries have their own `payments` table).

use sqlx::{PgConnection, SqliteConnection};

use super::Effect;

/// A connection of either backend: a pooled one, or a dedup transaction's.
#[derive(Debug)]
pub enum Conn<'c> {
    /// SQLite.
    Sqlite(&'c mut SqliteConnection),
    /// PostgreSQL.
    Postgres(&'c mut PgConnection),
}

/// Creates `conformance_payments`. No unique key on purpose: only the dedup transaction keeps
/// the effect single.
pub async fn create_table(conn: Conn<'_>) {
    let done = match conn {
        Conn::Sqlite(conn) => sqlx::query(
            "CREATE TABLE conformance_payments (seq INTEGER PRIMARY KEY AUTOINCREMENT, \
             event_id TEXT NOT NULL, amount BIGINT, currency TEXT)",
        )
        .execute(conn)
        .await
        .map(drop),
        Conn::Postgres(conn) => sqlx::query(
            "CREATE TABLE conformance_payments (seq BIGINT GENERATED ALWAYS AS IDENTITY \
             PRIMARY KEY, event_id TEXT NOT NULL, amount BIGINT, currency TEXT)",
        )
        .execute(conn)
        .await
        .map(drop),
    };
    done.unwrap_or_else(|e| panic!("cannot create conformance_payments: {e}"));
}

/// Records `effect` (on the caller's transaction, when `conn` is one).
pub async fn record(conn: Conn<'_>, effect: &Effect) -> Result<(), sqlx::Error> {
    match conn {
        Conn::Sqlite(conn) => sqlx::query(
            "INSERT INTO conformance_payments (event_id, amount, currency) VALUES (?1, ?2, ?3)",
        )
        .bind(&effect.event_id)
        .bind(effect.amount)
        .bind(&effect.currency)
        .execute(conn)
        .await
        .map(drop),
        Conn::Postgres(conn) => sqlx::query(
            "INSERT INTO conformance_payments (event_id, amount, currency) VALUES ($1, $2, $3)",
        )
        .bind(&effect.event_id)
        .bind(effect.amount)
        .bind(&effect.currency)
        .execute(conn)
        .await
        .map(drop),
    }
}

/// Everything recorded, in order.
pub async fn recorded(conn: Conn<'_>) -> Vec<Effect> {
    const SQL: &str = "SELECT event_id, amount, currency FROM conformance_payments ORDER BY seq";
    type Row = (String, Option<i64>, Option<String>);
    let rows: Result<Vec<Row>, sqlx::Error> = match conn {
        Conn::Sqlite(conn) => sqlx::query_as(SQL).fetch_all(conn).await,
        Conn::Postgres(conn) => sqlx::query_as(SQL).fetch_all(conn).await,
    };
    rows.unwrap_or_else(|e| panic!("cannot read conformance_payments: {e}"))
        .into_iter()
        .map(|(event_id, amount, currency)| Effect {
            event_id,
            amount,
            currency,
        })
        .collect()
}
