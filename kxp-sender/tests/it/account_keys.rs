//! The account-keyed schema's expand step (issue 29): rows written before it gain their
//! account, the credential directories are filled, this version finds what the previous
//! release writes beside it during a rolling upgrade (rows without an account, an account whose
//! key is on its own row only, an endpoint missing from the directory), and it keeps working
//! once the next release's contract step has dropped the identity columns and keyed the rows
//! by account.

use std::time::Duration;

use kxp_api::RotateSecret;
use kxp_sender::{Db, sha256_hex};
use kxp_testkit::db::{Backend, TestDatabase};
use serde_json::{Value, json};

use crate::support::{Database, Receiver, Reply, database_before, sender_with};

const WITHIN: Duration = Duration::from_secs(10);

/// The first migration of the account-keyed schema.
const ACCOUNT_COLUMNS: i64 = 20261204000001;

/// The SHA-256 of the test sender's key, `kxp_test_key`.
const TEST_KEY_HASH: &str = "2f3c05a4db153f852e2879aed8d7ae811450d9d0212d2f5e00454957e6e20669";

/// One row in each table that gained an account, in the shape before [`ACCOUNT_COLUMNS`]
/// (written a minute ago, so that no retention pass takes them).
fn rows() -> Vec<String> {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        - 60_000;
    let hour = at - at % 3_600_000;
    // Older than what the migrations fill themselves: `kxp migrate apply`'s fill does.
    let earlier = hour - 5 * 3_600_000;
    vec![
        format!(
            "INSERT INTO kxp_accounts (id, name, api_key_hash, default_api_version, created_at) \
             VALUES ('acc_old', 'old', '{TEST_KEY_HASH}', '2026-11-30', 1)"
        ),
        "INSERT INTO kxp_endpoints (id, account_id, url, event_types, timeout_ms, created_at, updated_at) \
         VALUES ('ep_old', 'acc_old', 'http://127.0.0.1:9/hook', '[\"*\"]', 1000, 1, 1)"
            .to_owned(),
        "INSERT INTO kxp_endpoint_secrets (endpoint_id, secret, created_at, kind) \
         VALUES ('ep_old', 'whsec_old', 1, 'hmac')"
            .to_owned(),
        format!(
            "INSERT INTO kxp_endpoint_stats (endpoint_id, consecutive_failures, updated_at) \
             VALUES ('ep_old', 1, {at})"
        ),
        format!(
            "INSERT INTO kxp_endpoint_stats_hourly (endpoint_id, hour, successes, failures, le_10, le_25, \
             le_50, le_100, le_250, le_500, le_1000, le_2500, le_5000, le_10000, le_30000, le_inf) \
             VALUES ('ep_old', {hour}, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), \
             ('ep_old', {earlier}, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)"
        ),
        "INSERT INTO kxp_sequences (endpoint_id, next_sequence) VALUES ('ep_old', 2)".to_owned(),
        format!(
            "INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at) \
             VALUES ('evt_old', 'acc_old', 'payment.succeeded', '2026-11-30', '{{}}', {at})"
        ),
        format!(
            "INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, \
             next_attempt_at, created_at, updated_at, sequence) \
             VALUES ('dlv_old', 'acc_old', 'evt_old', 'ep_old', 'delivered', 2, {at}, {at}, {at}, 1)"
        ),
        format!(
            "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code) \
             VALUES ('dlv_old', 1, {at}, 5, 500), ('dlv_old', 2, {at}, 5, 200)"
        ),
    ]
}

/// The tables that gained an account column.
const GAINED: [&str; 5] = [
    "kxp_endpoint_secrets",
    "kxp_attempts",
    "kxp_endpoint_stats",
    "kxp_endpoint_stats_hourly",
    "kxp_sequences",
];

/// `sql`'s one number, on either backend.
async fn number(db: &Db, sql: &str) -> i64 {
    match db {
        Db::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
        Db::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
    }
}

/// Runs `sql`, on either backend.
async fn execute(db: &Db, sql: &str) {
    match db {
        Db::Sqlite(pool) => {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
        Db::Postgres(pool) => {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
    }
}

/// The tables that gained an account, with their rows that lack it (none: empty).
async fn without_account(db: &Db) -> Vec<(&'static str, i64)> {
    let mut counts = Vec::new();
    for table in GAINED {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE account_id IS NULL");
        let count = number(db, &sql).await;
        if count > 0 {
            counts.push((table, count));
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rows_of_before_gain_their_account() {
    rows_of_before_gain_their_account(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_of_before_gain_their_account() {
    rows_of_before_gain_their_account(Backend::Postgres).await;
}

/// A database of the release before the account-keyed schema: migrating it (which the test
/// sender does at its start, as `kxp migrate apply` does) fills every row's account and the
/// directories, and the API reads the rows back by them.
async fn rows_of_before_gain_their_account(backend: Backend) {
    let Some(database) =
        database_before(backend, "kxp_sender_keys", ACCOUNT_COLUMNS, &rows()).await
    else {
        return;
    };
    let url = database.url().to_owned();
    let s = sender_with("0s", |config| config.database_url = url).await;
    let db = s.server.db();

    let unfilled = without_account(db).await;
    assert!(unfilled.is_empty(), "{unfilled:?}");
    for table in GAINED {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE account_id = 'acc_old'");
        assert!(number(db, &sql).await > 0, "{table}");
    }
    let keyed = format!(
        "SELECT COUNT(*) FROM kxp_api_keys WHERE key_hash = '{TEST_KEY_HASH}' AND account_id = 'acc_old'"
    );
    assert_eq!(number(db, &keyed).await, 1);
    let listed = "SELECT COUNT(*) FROM kxp_endpoint_directory \
                  WHERE endpoint_id = 'ep_old' AND account_id = 'acc_old'";
    assert_eq!(number(db, listed).await, 1);

    // Through the API, with the old account's key: its endpoint, health and attempts.
    let (status, endpoint) = s.api.call("GET", "/v1/endpoints/ep_old", None).await;
    assert_eq!(status, 200, "{endpoint}");
    let (status, health) = s.api.call("GET", "/v1/endpoints/ep_old/health", None).await;
    assert_eq!(
        (status, health["consecutive_failures"].as_i64()),
        (200, Some(1)),
        "{health}"
    );
    assert_eq!(s.api.attempts("dlv_old").await.len(), 2);
    s.server.shutdown().await;
    database.drop().await;
}

each_backend!(what_the_previous_release_writes_is_found_and_filled);

/// During a rolling upgrade the previous release writes rows without an account, creates
/// accounts with their key on their own row only and endpoints missing from the directory:
/// this version authenticates and serves them all the same, and filling (`kxp migrate
/// apply`, run again after the rollout) gives them what they lack.
async fn what_the_previous_release_writes_is_found_and_filled(database: Database) {
    let s = database.sender("0s").await;
    let db = s.server.db();
    let receiver = Receiver::start(vec![Reply::Status(200)]).await;
    let (endpoint, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    let delivered = s.api.wait_for(&event, "delivered", WITHIN).await;
    let delivery = delivered["id"].as_str().unwrap();

    // What the previous release would have written.
    let older_key = "kxp_written_by_the_previous_release";
    execute(
        db,
        &format!(
            "INSERT INTO kxp_accounts (id, name, api_key_hash, default_api_version, created_at) \
             VALUES ('acc_older', 'older', '{}', '2026-11-30', 1)",
            sha256_hex(older_key.as_bytes())
        ),
    )
    .await;
    execute(
        db,
        &format!("DELETE FROM kxp_endpoint_directory WHERE endpoint_id = '{endpoint}'"),
    )
    .await;
    execute(
        db,
        &format!(
            "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code) \
             VALUES ('{delivery}', 9, 1, 5, 200)"
        ),
    )
    .await;
    execute(
        db,
        &format!(
            "INSERT INTO kxp_endpoint_secrets (endpoint_id, secret, created_at, kind, expires_at) \
             VALUES ('{endpoint}', 'whsec_older', 1, 'hmac', 2)"
        ),
    )
    .await;
    let (quiet, _) = s
        .api
        .endpoint(&receiver.url, json!({"event_types": ["none"]}))
        .await;
    execute(
        db,
        &format!(
            "INSERT INTO kxp_endpoint_stats (endpoint_id, consecutive_failures, updated_at) \
             VALUES ('{quiet}', 0, 1)"
        ),
    )
    .await;
    // On PostgreSQL, where the previous release runs beside this one, the small tables' rows
    // get their endpoint's account as they are inserted (a trigger); the fill does the rest.
    let on_insert = matches!(db, Db::Postgres(_));
    let stats = "SELECT COUNT(*) FROM kxp_endpoint_stats WHERE account_id IS NULL";
    assert_eq!(number(db, stats).await, i64::from(!on_insert));

    // The account's key works though only its own row knows it.
    let (status, listed) = s
        .api
        .with_key(older_key)
        .call("GET", "/v1/endpoints", None)
        .await;
    assert_eq!(
        (status, listed["data"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{listed}"
    );
    // The feed finds the endpoint that the directory does not list.
    let token = s
        .api
        .client
        .create_feed_token(&endpoint.as_str().into())
        .await
        .unwrap();
    let feed = s
        .api
        .http
        .get(format!("{}/v1/endpoints/{endpoint}/feed", s.api.base))
        .header("authorization", format!("Bearer {}", token.token))
        .send()
        .await
        .unwrap();
    assert_eq!(feed.status().as_u16(), 200);
    // And the hourly tallies (the sender's own, emptied of their account here).
    execute(db, "UPDATE kxp_endpoint_stats_hourly SET account_id = NULL").await;
    let tallies = number(db, "SELECT COUNT(*) FROM kxp_endpoint_stats_hourly").await;
    assert!(tallies > 0);
    let filled = db.fill_accounts().await.unwrap();
    assert_eq!(
        i64::try_from(filled).unwrap(),
        3 + tallies + if on_insert { 0 } else { 2 },
        "an attempt, a key, a directory row, the tallies (and without the trigger a secret \
         and a statistics row)"
    );
    let unfilled = without_account(db).await;
    assert!(unfilled.is_empty(), "{unfilled:?}");
    assert_eq!(db.fill_accounts().await.unwrap(), 0);
    let keyed = "SELECT COUNT(*) FROM kxp_api_keys WHERE account_id = 'acc_older'";
    assert_eq!(number(db, keyed).await, 1);
    s.server.shutdown().await;
}

/// The next release's contract step, as far as ids go (PostgreSQL): the identity columns
/// dropped and the rows keyed by account and parent.
const CONTRACT: [&str; 2] = [
    "ALTER TABLE kxp_attempts DROP CONSTRAINT kxp_attempts_pkey, ALTER COLUMN id DROP IDENTITY, \
     ALTER COLUMN account_id SET NOT NULL, ADD PRIMARY KEY (account_id, delivery_id, id)",
    "ALTER TABLE kxp_endpoint_secrets DROP CONSTRAINT kxp_endpoint_secrets_pkey, \
     ALTER COLUMN id DROP IDENTITY, ALTER COLUMN account_id SET NOT NULL, \
     ADD PRIMARY KEY (account_id, endpoint_id, id)",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_version_numbers_attempts_and_secrets_once_the_identities_are_gone() {
    let Some(database) = TestDatabase::create(Backend::Postgres, "kxp_sender_ids").await else {
        return;
    };
    let url = database.url().to_owned();
    let s = sender_with("0s,0s", |config| config.database_url = url).await;
    let db = s.server.db();
    for sql in CONTRACT {
        execute(db, sql).await;
    }

    // Two endpoints: each numbers its own secrets, from 1.
    let receiver = Receiver::start(vec![Reply::Status(500), Reply::Status(200)]).await;
    let (first, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let (second, _) = s
        .api
        .endpoint(&receiver.url, json!({"event_types": ["none"]}))
        .await;
    s.api
        .client
        .rotate_secret(&first.as_str().into(), &RotateSecret::overlap("1h"))
        .await
        .unwrap();
    let ids = |endpoint: &str| {
        format!(
            "SELECT CAST(COALESCE(SUM(id), 0) * 10 + COUNT(*) AS BIGINT) FROM kxp_endpoint_secrets \
             WHERE endpoint_id = '{endpoint}'"
        )
    };
    assert_eq!(number(db, &ids(&first)).await, 32, "ids 1 and 2");
    assert_eq!(number(db, &ids(&second)).await, 11, "id 1");

    // A delivery retried once: its attempts are numbered 1 and 2, and read back in order.
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    let delivered = s.api.wait_for(&event, "delivered", WITHIN).await;
    let attempts: Vec<Value> = s.api.attempts(delivered["id"].as_str().unwrap()).await;
    let statuses: Vec<_> = attempts.iter().map(|a| a["status_code"].as_i64()).collect();
    assert_eq!(statuses, [Some(500), Some(200)]);
    let numbered = format!(
        "SELECT MAX(id) * 10 + COUNT(*) FROM kxp_attempts WHERE delivery_id = '{}'",
        delivered["id"].as_str().unwrap()
    );
    assert_eq!(number(db, &numbered).await, 22);

    // The rotated endpoint signs with both secrets, newest first.
    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    let signature = seen[1].header("x-kxp-signature");
    assert_eq!(signature.matches("v1=").count(), 2, "{signature}");
    s.server.shutdown().await;
    database.drop().await;
}
