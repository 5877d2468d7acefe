//! The SQLite and PostgreSQL schemas agree once every migration has run: the same tables,
//! columns (by type family), nullability, primary keys, unique keys, foreign keys, identity
//! columns and indexes (by name and columns; a partial index's predicate is written in each
//! dialect, so it is not compared). The store writes each statement once for both databases,
//! which holds only while the two schemas are the same; a migration written for one backend and
//! forgotten, or written differently, for the other fails here.
//!
//! And both have the shape a distributed database needs (docs/design/account-keyed-schema.md):
//! every table but the account-less directories carries a `NOT NULL account_id` that leads its
//! primary key and every unique key, foreign keys between such tables include it, the accounts
//! have no unique key but their id, and no column is an identity (sequence-generated) one.

use std::collections::{BTreeMap, BTreeSet};

use kxp_sender::Db;
use kxp_testkit::db::{Backend, TestDatabase};
use sqlx::{Connection, PgConnection, SqliteConnection};

/// The differences today's migrations have, each on purpose or harmless, so that a new one
/// fails the test and a fixed one asks to be taken off the list.
// Empty: after every migration of 2026-12-03 the two schemas agree in all the test compares.
const KNOWN: &[&str] = &[];

/// Tables keyed by something other than an account, by design: the accounts themselves and
/// the directories a request reads before it knows its account (API keys, listen tokens,
/// endpoints named by the feed, operators, portal links, console sessions), and the operators'
/// own audit rows.
const ACCOUNTLESS: &[&str] = &[
    "kxp_accounts",
    "kxp_api_keys",
    "kxp_endpoint_directory",
    "kxp_listen_tokens",
    "kxp_operator_audit",
    "kxp_operators",
    "kxp_portal_links",
    "kxp_sessions",
];

/// One table's shape, in terms both databases share.
#[derive(Debug, Default)]
struct Table {
    /// Column → (type family, nullable).
    columns: BTreeMap<String, (String, bool)>,
    primary_key: Vec<String>,
    /// The column lists of unique constraints (their names are the databases' own).
    unique: BTreeSet<Vec<String>>,
    /// (columns, referenced table, referenced columns).
    foreign_keys: BTreeSet<(Vec<String>, String, Vec<String>)>,
    /// Index created by name → (unique, columns or expressions).
    indexes: BTreeMap<String, (bool, Vec<String>)>,
    /// Columns the database numbers itself: PostgreSQL's identity and serial columns,
    /// SQLite's `INTEGER PRIMARY KEY` (a rowid alias, `AUTOINCREMENT` or not).
    identity: BTreeSet<String>,
}

type Schema = BTreeMap<String, Table>;

/// A SQLite foreign key as its rows list it: (columns, parent, parent columns if named).
type SqliteForeignKey = (Vec<String>, String, Vec<Option<String>>);

/// A PostgreSQL constraint: (kind, columns, referenced table, referenced columns).
type PgConstraint = (String, Vec<String>, Option<String>, Vec<String>);

/// A declared type as its family: SQLite's affinity rules, PostgreSQL's type names.
fn family(declared: &str) -> String {
    let t = declared.to_ascii_lowercase();
    let family = if t.contains("int") || t == "bigserial" || t == "serial" {
        "integer"
    } else if t.contains("char") || t.contains("text") || t.contains("clob") {
        "text"
    } else if t.contains("json") {
        "json"
    } else if t.contains("blob") || t == "bytea" {
        "bytes"
    } else if t.starts_with("bool") {
        "bool"
    } else if t.contains("real") || t.contains("floa") || t.contains("doub") || t == "numeric" {
        "float"
    } else {
        // A typo'd or missing type is a difference of its own, named as it was declared.
        return format!("other({t})");
    };
    family.to_owned()
}

/// The schema of the SQLite database at `url`.
async fn sqlite_schema(url: &str) -> Schema {
    let mut conn = SqliteConnection::connect(url).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut schema = Schema::new();
    for name in names {
        let mut table = Table::default();
        let columns: Vec<(String, String, i64, i64)> = sqlx::query_as(
            "SELECT name, type, \"notnull\", pk FROM pragma_table_info($1) ORDER BY cid",
        )
        .bind(&name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let mut key: Vec<(i64, String)> = Vec::new();
        for (column, declared, not_null, pk) in columns {
            // A primary key column is NOT NULL on PostgreSQL whatever it declares; SQLite
            // allows NULL in a non-INTEGER one unless declared: compare what the schema says
            // a row may hold once the key is set.
            let nullable = not_null == 0 && pk == 0;
            if pk > 0 {
                key.push((pk, column.clone()));
            }
            table.columns.insert(column, (family(&declared), nullable));
        }
        key.sort();
        table.primary_key = key.into_iter().map(|(_, c)| c).collect();
        if let [only] = table.primary_key.as_slice()
            && table.columns[only].0 == "integer"
        {
            table.identity.insert(only.clone());
        }
        let indexes: Vec<(String, i64, String)> =
            sqlx::query_as("SELECT name, \"unique\", origin FROM pragma_index_list($1)")
                .bind(&name)
                .fetch_all(&mut conn)
                .await
                .unwrap();
        for (index, unique, origin) in indexes {
            let columns: Vec<Option<String>> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                    .bind(&index)
                    .fetch_all(&mut conn)
                    .await
                    .unwrap();
            let columns: Vec<String> = columns
                .into_iter()
                .map(|c| c.unwrap_or_else(|| "<expression>".to_owned()))
                .collect();
            match origin.as_str() {
                "pk" => {}
                "u" => {
                    table.unique.insert(columns);
                }
                _ => {
                    table.indexes.insert(index, (unique == 1, columns));
                }
            }
        }
        let keys: Vec<(i64, String, String, Option<String>)> = sqlx::query_as(
            "SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list($1) ORDER BY id, seq",
        )
        .bind(&name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let mut grouped: BTreeMap<i64, SqliteForeignKey> = BTreeMap::new();
        for (id, parent, from, to) in keys {
            let entry = grouped
                .entry(id)
                .or_insert((Vec::new(), parent, Vec::new()));
            entry.0.push(from);
            entry.2.push(to);
        }
        for (from, parent, to) in grouped.into_values() {
            // `REFERENCES parent` alone names the parent's primary key.
            let to = if to.iter().all(Option::is_some) {
                to.into_iter().flatten().collect()
            } else {
                sqlx::query_scalar(
                    "SELECT name FROM pragma_table_info($1) WHERE pk > 0 ORDER BY pk",
                )
                .bind(&parent)
                .fetch_all(&mut conn)
                .await
                .unwrap()
            };
            table.foreign_keys.insert((from, parent, to));
        }
        schema.insert(name, table);
    }
    conn.close().await.unwrap();
    schema
}

/// The schema of the PostgreSQL database at `url`.
async fn postgres_schema(url: &str) -> Schema {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() \
         AND table_type = 'BASE TABLE' AND table_name <> '_sqlx_migrations' ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let mut schema = Schema::new();
    for name in names {
        let mut table = Table::default();
        let columns: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT column_name::text, data_type::text, is_nullable::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        )
        .bind(&name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        for (column, declared, nullable) in columns {
            table
                .columns
                .insert(column, (family(&declared), nullable == "YES"));
        }
        let numbered: Vec<String> = sqlx::query_scalar(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')",
        )
        .bind(&name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        table.identity.extend(numbered);
        let constraints: Vec<PgConstraint> = sqlx::query_as(
            "SELECT c.contype::text, \
               ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(n, o) \
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.o), \
               CASE WHEN c.contype = 'f' THEN (SELECT relname::text FROM pg_class WHERE oid = c.confrelid) END, \
               ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY AS k(n, o) \
                 JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.o) \
             FROM pg_constraint c WHERE c.conrelid = $1::regclass AND c.contype IN ('p', 'u', 'f')",
        )
        .bind(&name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        for (kind, columns, parent, to) in constraints {
            match (kind.as_str(), parent) {
                ("p", _) => table.primary_key = columns,
                ("u", _) => {
                    table.unique.insert(columns);
                }
                (_, Some(parent)) => {
                    table.foreign_keys.insert((columns, parent, to));
                }
                (_, None) => {}
            }
        }
        let indexes: Vec<(String, bool, Vec<String>)> = sqlx::query_as(
            "SELECT x.relname::text, i.indisunique, \
               ARRAY(SELECT pg_get_indexdef(i.indexrelid, k, true) FROM generate_series(1, i.indnkeyatts) AS k ORDER BY k) \
             FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid \
             WHERE i.indrelid = $1::regclass \
             AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)",
        )
        .bind(&name)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        for (index, unique, columns) in indexes {
            // An expression is written in each dialect; only its presence is compared.
            let columns = columns
                .into_iter()
                .map(|c| {
                    if c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
                        c
                    } else {
                        "<expression>".to_owned()
                    }
                })
                .collect();
            table.indexes.insert(index, (unique, columns));
        }
        schema.insert(name, table);
    }
    conn.close().await.unwrap();
    schema
}

/// Every difference between the two schemas, one line each, in a stable order.
fn differences(sqlite: &Schema, postgres: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    let names: BTreeSet<&String> = sqlite.keys().chain(postgres.keys()).collect();
    for name in names {
        let (s, p) = match (sqlite.get(name), postgres.get(name)) {
            (Some(s), Some(p)) => (s, p),
            (Some(_), None) => {
                out.push(format!("{name}: only on SQLite"));
                continue;
            }
            (None, _) => {
                out.push(format!("{name}: only on PostgreSQL"));
                continue;
            }
        };
        let columns: BTreeSet<&String> = s.columns.keys().chain(p.columns.keys()).collect();
        for column in columns {
            match (s.columns.get(column), p.columns.get(column)) {
                (Some(a), Some(b)) if a == b => {}
                (a, b) => out.push(format!("{name}.{column}: SQLite {a:?}, PostgreSQL {b:?}")),
            }
        }
        if s.primary_key != p.primary_key {
            out.push(format!(
                "{name}: primary key SQLite {:?}, PostgreSQL {:?}",
                s.primary_key, p.primary_key
            ));
        }
        one_sided(&mut out, &format!("{name}: unique"), &s.unique, &p.unique);
        one_sided(
            &mut out,
            &format!("{name}: identity"),
            &s.identity,
            &p.identity,
        );
        let what = format!("{name}: foreign key");
        one_sided(&mut out, &what, &s.foreign_keys, &p.foreign_keys);
        let indexes: BTreeSet<&String> = s.indexes.keys().chain(p.indexes.keys()).collect();
        for index in indexes {
            match (s.indexes.get(index), p.indexes.get(index)) {
                (Some(a), Some(b)) if a == b => {}
                (a, b) => out.push(format!(
                    "{name}: index {index}: SQLite {a:?}, PostgreSQL {b:?}"
                )),
            }
        }
    }
    out
}

/// Where `schema` falls short of the account-keyed shape, one line each, in a stable order.
fn shape_violations(schema: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    let scoped = |table: &str| !ACCOUNTLESS.contains(&table);
    for (name, table) in schema.iter().filter(|(name, _)| scoped(name)) {
        if table.columns.get("account_id") != Some(&("text".to_owned(), false)) {
            out.push(format!("{name}: no NOT NULL account_id"));
        }
        let leads = |columns: &[String]| columns.first().is_some_and(|c| c == "account_id");
        if !leads(&table.primary_key) {
            out.push(format!(
                "{name}: primary key {:?} does not lead with account_id",
                table.primary_key
            ));
        }
        let unique_indexes = table
            .indexes
            .values()
            .filter(|(unique, _)| *unique)
            .map(|(_, columns)| columns);
        for columns in table.unique.iter().chain(unique_indexes) {
            if !leads(columns) {
                out.push(format!(
                    "{name}: unique {columns:?} does not lead with account_id"
                ));
            }
        }
        for (columns, parent, _) in &table.foreign_keys {
            if scoped(parent) && !columns.iter().any(|c| c == "account_id") {
                out.push(format!(
                    "{name}: foreign key {columns:?} → {parent} does not include account_id"
                ));
            }
        }
    }
    // The accounts themselves are distributed by their id: no other unique key.
    if let Some(accounts) = schema.get("kxp_accounts") {
        for columns in &accounts.unique {
            if !columns.iter().any(|c| c == "id") {
                out.push(format!(
                    "kxp_accounts: unique {columns:?} does not include id"
                ));
            }
        }
    }
    for (name, table) in schema {
        for column in &table.identity {
            out.push(format!("{name}.{column} is an identity column"));
        }
    }
    out.sort();
    out
}

/// The members of `sqlite` and `postgres` that the other lacks, as `what` and the side.
fn one_sided<T: Ord + std::fmt::Debug>(
    out: &mut Vec<String>,
    what: &str,
    sqlite: &BTreeSet<T>,
    postgres: &BTreeSet<T>,
) {
    for item in sqlite.symmetric_difference(postgres) {
        let side = if sqlite.contains(item) {
            "SQLite"
        } else {
            "PostgreSQL"
        };
        out.push(format!("{what} {item:?} only on {side}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_and_postgres_schemas_agree_after_all_migrations() {
    let Some(postgres) = TestDatabase::create(Backend::Postgres, "kxp_sender_schema").await else {
        return;
    };
    let sqlite = TestDatabase::create(Backend::Sqlite, "kxp_sender_schema")
        .await
        .unwrap();
    for database in [&sqlite, &postgres] {
        Db::connect(database.url()).await.unwrap().close().await;
    }
    let (s, p) = (
        sqlite_schema(sqlite.url()).await,
        postgres_schema(postgres.url()).await,
    );
    assert!(s.len() > 10, "SQLite's tables were not read: {s:?}");
    let found = differences(&s, &p);
    let known: Vec<String> = KNOWN.iter().map(|d| (*d).to_owned()).collect();
    assert_eq!(
        found, known,
        "the schemas differ (left: found, right: the known differences)"
    );
    for (backend, schema) in [("SQLite", &s), ("PostgreSQL", &p)] {
        let violations = shape_violations(schema);
        assert!(
            violations.is_empty(),
            "{backend}'s schema moved away from the account-keyed shape: {violations:#?}"
        );
    }
    postgres.drop().await;
    sqlite.drop().await;
}
