//! The account-keyed schema (issue 29): rows written before it gain their account and keep
//! their ids, the credential directories are filled, what the expand step left (the rows the
//! release before it wrote without an account during that rollout, an account whose key is on
//! its own row only, an endpoint missing from the directory, account-less audit rows) is
//! filled or moved by the contract step, and attempts and secrets are numbered per delivery
//! and per endpoint once the identities are gone.

use std::time::Duration;

use kxp_api::RotateSecret;
use kxp_sender::{Db, sha256_hex};
use kxp_testkit::db::Backend;
use serde_json::{Value, json};

use crate::support::{Database, Receiver, Reply, database_before, sender_with};

const WITHIN: Duration = Duration::from_secs(10);

/// The first migration of the account-keyed schema (the expand step).
const ACCOUNT_COLUMNS: i64 = 20261204000001;

/// The first migration of its contract step.
const CONTRACT: i64 = 20261205000001;

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
         VALUES ('ep_old', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 1, 'hmac')"
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
        Db::Postgres(pool) | Db::Citus(pool) => {
            sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
        }
    }
}

/// Each table that gained an account, with how many of its rows belong to `account`.
async fn rows_of(db: &Db, account: &str) -> Vec<(&'static str, i64)> {
    let mut counts = Vec::new();
    for table in GAINED {
        let sql = format!("SELECT COUNT(*) FROM {table} WHERE account_id = '{account}'");
        counts.push((table, number(db, &sql).await));
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

/// A database of the release before the account-keyed schema: migrating it through both steps
/// at once (which the test sender does at its start, as `kxp migrate apply` does) gives every
/// row its account, keeps the attempts' ids, fills the directories, and the API reads the
/// rows back by them.
async fn rows_of_before_gain_their_account(backend: Backend) {
    let Some(database) =
        database_before(backend, "kxp_sender_keys", ACCOUNT_COLUMNS, &rows()).await
    else {
        return;
    };
    let url = database.url().to_owned();
    let s = sender_with("0s", |config| config.database_url = url).await;
    let db = s.server.db();

    let counts = rows_of(db, "acc_old").await;
    assert!(counts.iter().all(|(_, n)| *n > 0), "{counts:?}");
    let ids = "SELECT MIN(id) * 10 + MAX(id) FROM kxp_attempts WHERE delivery_id = 'dlv_old'";
    assert_eq!(number(db, ids).await, 12);
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

/// What the release before the expand step wrote during that rollout, beside it, and what
/// the expand step leaves for the contract step: its rows without an account, an account with
/// its key on its own row only, an endpoint the directory does not list, an audit row of no
/// account.
fn left_by_the_expand_step(at: u128) -> Vec<String> {
    let mut rows = rows();
    rows.extend([
        format!(
            "INSERT INTO kxp_accounts (id, name, api_key_hash, default_api_version, created_at) \
             VALUES ('acc_older', 'older', '{}', '2026-11-30', 1)",
            sha256_hex(OLDER_KEY.as_bytes())
        ),
        "INSERT INTO kxp_endpoint_secrets (endpoint_id, secret, created_at, kind, expires_at) \
         VALUES ('ep_old', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 2, 'hmac', 4102444800000)"
            .to_owned(),
        format!(
            "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code) \
             VALUES ('dlv_old', 3, {at}, 5, 200)"
        ),
        "INSERT INTO kxp_audit (id, at, actor_kind, actor_id, actor_name, via, action) \
         VALUES ('aud_operator', 1, 'operator', 'op_1', 'ops', 'api', 'account.create')"
            .to_owned(),
    ]);
    rows
}

/// The key of the account the release before the expand step created during its rollout.
const OLDER_KEY: &str = "kxp_written_by_the_release_before";

each_backend!(what_the_expand_step_left_is_filled_by_the_contract_step);

/// A database of the expand step, with what it left behind ([`left_by_the_expand_step`]; the
/// expand step's own fill, which would have taken some of it, not run): the contract step
/// fills it in, moves the account-less audit row, and the API serves it all by account.
async fn what_the_expand_step_left_is_filled_by_the_contract_step(database: Database) {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        - 60_000;
    // The rows written after the expand step's migrations (on PostgreSQL its triggers give
    // the small tables' rows their account as they are inserted; the contract step fills the
    // rest).
    let Some(expanded) = database_before(
        database.backend(),
        "kxp_sender_contract",
        CONTRACT,
        &left_by_the_expand_step(at),
    )
    .await
    else {
        return;
    };
    let url = expanded.url().to_owned();
    let s = sender_with("0s", |config| config.database_url = url).await;
    let db = s.server.db();
    let counts = rows_of(db, "acc_old").await;
    assert!(counts.iter().all(|(_, n)| *n > 0), "{counts:?}");
    let attempts = "SELECT COUNT(*) FROM kxp_attempts WHERE account_id = 'acc_old'";
    assert_eq!(number(db, attempts).await, 3);
    let secrets = "SELECT COUNT(*) FROM kxp_endpoint_secrets WHERE account_id = 'acc_old'";
    assert_eq!(number(db, secrets).await, 2);
    let moved = "SELECT COUNT(*) FROM kxp_operator_audit WHERE id = 'aud_operator'";
    assert_eq!(number(db, moved).await, 1);
    assert_eq!(number(db, "SELECT COUNT(*) FROM kxp_audit").await, 0);
    let listed = "SELECT COUNT(*) FROM kxp_endpoint_directory WHERE endpoint_id = 'ep_old'";
    assert_eq!(number(db, listed).await, 1);

    // Both accounts' keys, through the key directory alone.
    for (key, endpoints) in [(OLDER_KEY, 0), ("kxp_test_key", 1)] {
        let (status, listed) = s.api.with_key(key).call("GET", "/v1/endpoints", None).await;
        assert_eq!(
            (status, listed["data"].as_array().map(Vec::len)),
            (200, Some(endpoints)),
            "{listed}"
        );
    }
    assert_eq!(s.api.attempts("dlv_old").await.len(), 3);
    // The feed finds the endpoint through the directory.
    let token = s
        .api
        .client
        .create_feed_token(&"ep_old".into())
        .await
        .unwrap();
    let feed = s
        .api
        .http
        .get(format!("{}/v1/endpoints/ep_old/feed", s.api.base))
        .header("authorization", format!("Bearer {}", token.token))
        .send()
        .await
        .unwrap();
    let status = feed.status().as_u16();
    assert_eq!(status, 200, "{}", feed.text().await.unwrap());
    s.server.shutdown().await;
    expanded.drop().await;
}

each_backend!(attempts_and_secrets_are_numbered_per_parent);

/// No identity columns: attempts are numbered per delivery and secrets per endpoint, from 1.
async fn attempts_and_secrets_are_numbered_per_parent(database: Database) {
    let s = database.sender("0s,0s").await;
    let db = s.server.db();

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
}
