//! Every table has a place (on PostgreSQL, checked without Citus), and the distribution on a
//! real Citus cluster: complete, co-located, idempotent, keeping the rows a database already
//! had, and refusing a table it does not know.

use std::time::Duration;

use kxp_testkit::citus::CitusDatabase;
use kxp_testkit::db::PgDatabase;
use sqlx::PgPool;

use super::*;
use crate::store::{Db, Migrations, SchemaError};

const APPLY: Migrations = Migrations::Apply {
    lock_timeout: Duration::ZERO,
};

/// The `kxp_` tables of a migrated database, by name.
async fn tables(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT relname::text FROM pg_class WHERE relkind = 'r' \
         AND relnamespace = current_schema()::regnamespace AND relname LIKE 'kxp\\_%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// What Citus needs of the lists, checked on plain PostgreSQL so a new table is placed before
/// anyone runs Citus: every table is in one list, each table's foreign keys point at tables
/// before it in its list (or, from an account table, at `kxp_accounts`), and every key of an
/// account table holds its distribution column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_table_has_one_place_and_the_order_citus_needs() {
    let Some(database) = PgDatabase::create("kxp_sender_places").await else {
        return;
    };
    let db = Db::connect_with(database.url(), APPLY, Duration::ZERO)
        .await
        .unwrap();
    let (Db::Postgres(pool) | Db::Citus(pool)) = &db else {
        unreachable!("a postgres:// URL opens PostgreSQL")
    };
    for table in tables(pool).await {
        let places = usize::from(BY_ACCOUNT.contains(&table.as_str()))
            + usize::from(REFERENCE.contains(&table.as_str()));
        assert_eq!(
            places, 1,
            "{table} must be in exactly one of BY_ACCOUNT and REFERENCE"
        );
    }
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint \
         WHERE contype = 'f' AND connamespace = current_schema()::regnamespace",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (from, to) in keys {
        let position = |list: &[&str], t: &str| list.iter().position(|l| *l == t);
        match (position(BY_ACCOUNT, &from), position(REFERENCE, &from)) {
            (Some(i), None) => assert!(
                position(BY_ACCOUNT, &to).is_some_and(|j| j < i),
                "{from} points at {to}: it must come after it in BY_ACCOUNT"
            ),
            (None, Some(i)) => assert!(
                position(REFERENCE, &to).is_some_and(|j| j < i)
                    || BY_ACCOUNT.contains(&to.as_str()),
                "{from} points at {to}: it must come after it in REFERENCE"
            ),
            _ => unreachable!("checked above"),
        }
    }
    let keys: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.conrelid::regclass::text, pg_get_constraintdef(c.oid) FROM pg_constraint c \
         WHERE c.contype IN ('p', 'u') AND c.connamespace = current_schema()::regnamespace",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (table, key) in keys {
        let column = if table == "kxp_accounts" {
            "id"
        } else {
            "account_id"
        };
        if BY_ACCOUNT.contains(&table.as_str()) {
            assert!(
                key.split(['(', ')', ',', ' ']).any(|word| word == column),
                "{table}'s key {key} lacks {column}: Citus refuses it on a distributed table"
            );
        }
    }
    db.close().await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_distributes_every_table_once_and_keeps_the_rows_it_had() {
    let Some(database) = CitusDatabase::create("kxp_sender_distribute").await else {
        return;
    };
    // The schema of a database migrated before it had workers or Citus's step: the sqlx
    // migrations alone, then rows.
    let pool = PgPool::connect(database.url()).await.unwrap();
    crate::store::migrations::POSTGRES.run(&pool).await.unwrap();
    let status = Db::open(database.url())
        .await
        .unwrap()
        .schema_status()
        .await
        .unwrap();
    let distribution = status.distribution.clone().expect("the database has Citus");
    assert_eq!(distribution.workers, 2);
    assert_eq!(
        distribution.local().count(),
        BY_ACCOUNT.len() + REFERENCE.len()
    );
    assert!(
        matches!(status.refusal(), Some(SchemaError::Undistributed { .. })),
        "{:?}",
        status.refusal()
    );

    let unmigrated = Db::open(database.url()).await.unwrap();
    let (account, key) = unmigrated.create_account("before", None).await.unwrap();
    unmigrated.close().await;

    let db = Db::connect_with(database.url(), APPLY, Duration::ZERO)
        .await
        .unwrap();
    assert!(matches!(db, Db::Citus(_)));
    let status = db.schema_status().await.unwrap();
    assert!(status.is_current(), "{:?}", status.refusal());
    let distribution = status.distribution.unwrap();
    let mut colocations = Vec::new();
    for table in &distribution.tables {
        if BY_ACCOUNT.contains(&table.name.as_str()) {
            let column = if table.name == "kxp_accounts" {
                "id"
            } else {
                "account_id"
            };
            assert_eq!(
                table.placement,
                Placement::Distributed {
                    column: column.to_owned(),
                    shards: 4
                },
                "{}",
                table.name
            );
            let colocation: i32 = sqlx::query_scalar(
                "SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = $1::regclass",
            )
            .bind(&table.name)
            .fetch_one(&pool)
            .await
            .unwrap();
            colocations.push(colocation);
        } else {
            assert_eq!(table.placement, Placement::Reference, "{}", table.name);
        }
    }
    colocations.dedup();
    assert_eq!(
        colocations.len(),
        1,
        "every account table shares one co-location group"
    );

    // The row written before is read through the shards, and found by its key through the
    // directory.
    let found = db.account_by_key(&key).await.unwrap().unwrap();
    assert_eq!(found.id, account.id);
    // Again: nothing is left to place.
    let Db::Citus(citus) = &db else {
        unreachable!()
    };
    let mut conn = citus.acquire().await.unwrap();
    assert!(distribute(&mut conn).await.unwrap().is_empty());

    // A table no list names, left undistributed by the migration that made it, is refused by
    // name.
    sqlx::query("CREATE TABLE kxp_unplaced (account_id TEXT)")
        .execute(&mut *conn)
        .await
        .unwrap();
    match distribute(&mut conn).await {
        Err(DistributeError::Unplaced(table)) => assert_eq!(table, "kxp_unplaced"),
        other => panic!("expected Unplaced, got {other:?}"),
    }
    drop(conn);
    db.close().await;
    pool.close().await;
    database.drop().await;
}
