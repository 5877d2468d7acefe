//! Upgrading a database of an earlier release: the migrations carry its rows into the new
//! shape, on both backends, and the server reads them back through the API.

use kxp_testkit::db::Backend;
use serde_json::json;

use crate::support::{database_before, sender_with};

/// The migration that keys events by account (security round 2, item 1).
const EVENT_IDS_PER_ACCOUNT: i64 = 20261203000001;

const EVENT_1: &str = "0190f1e2-7c3a-7def-8abc-000000000001";
const EVENT_2: &str = "0190f1e2-7c3a-7def-8abc-000000000002";

/// An account whose key is the test sender's (`kxp_test_key`, by its SHA-256), an endpoint,
/// two events (one tagged), a delivery of each and three attempts, in the shape before
/// [`EVENT_IDS_PER_ACCOUNT`]; written a minute ago, so that no retention pass takes them.
fn rows() -> Vec<String> {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        - 60_000;
    let envelope = |id: &str| {
        json!({"id": id, "type": "payment.succeeded", "api_version": "2026-11-30",
               "created_at": "2026-12-01T00:00:00Z", "data": {"n": 1}})
        .to_string()
    };
    vec![
        "INSERT INTO kxp_accounts (id, name, api_key_hash, default_api_version, created_at) \
         VALUES ('acc_old', 'old', '2f3c05a4db153f852e2879aed8d7ae811450d9d0212d2f5e00454957e6e20669', '2026-11-30', 1)"
            .to_owned(),
        "INSERT INTO kxp_endpoints (id, account_id, url, event_types, timeout_ms, created_at, updated_at) \
         VALUES ('ep_old', 'acc_old', 'http://127.0.0.1:9/hook', '[\"*\"]', 1000, 1, 1)"
            .to_owned(),
        format!(
            "INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at) \
             VALUES ('{EVENT_1}', 'acc_old', 'payment.succeeded', '2026-11-30', '{}', {at}), \
             ('{EVENT_2}', 'acc_old', 'payment.succeeded', '2026-11-30', '{}', {at})",
            envelope(EVENT_1),
            envelope(EVENT_2)
        ),
        format!(
            "INSERT INTO kxp_event_tags (event_id, tag, account_id, created_at) \
             VALUES ('{EVENT_1}', 'order:1', 'acc_old', {at})"
        ),
        format!(
            "INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, \
             next_attempt_at, created_at, updated_at, sequence) \
             VALUES ('dlv_old1', 'acc_old', '{EVENT_1}', 'ep_old', 'delivered', 2, {at}, {at}, {at}, 1), \
             ('dlv_old2', 'acc_old', '{EVENT_2}', 'ep_old', 'dead', 1, {at}, {at}, {at}, 2)"
        ),
        format!(
            "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code) \
             VALUES ('dlv_old1', 1, {at}, 5, 500), ('dlv_old1', 2, {at}, 5, 200), ('dlv_old2', 1, {at}, 5, 500)"
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_events_keep_their_rows_when_keyed_by_account() {
    events_keep_their_rows(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_events_keep_their_rows_when_keyed_by_account() {
    events_keep_their_rows(Backend::Postgres).await;
}

async fn events_keep_their_rows(backend: Backend) {
    let Some(database) = database_before(
        backend,
        "kxp_sender_upgrade",
        EVENT_IDS_PER_ACCOUNT,
        &rows(),
    )
    .await
    else {
        return;
    };

    let url = database.url().to_owned();
    let s = sender_with("0s", |config| config.database_url = url).await;
    let (status, event) = s
        .api
        .call("GET", &format!("/v1/events/{EVENT_1}"), None)
        .await;
    assert_eq!(
        (status, event["data"]["n"].as_i64()),
        (200, Some(1)),
        "{event}"
    );
    let (status, tagged) = s.api.call("GET", "/v1/events?tag=order:1", None).await;
    assert_eq!(status, 200, "{tagged}");
    let ids: Vec<&str> = tagged["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [EVENT_1]);
    let deliveries = s.api.deliveries_of(EVENT_1).await;
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(s.api.attempts("dlv_old1").await.len(), 2);
    let dead = s.api.deliveries_of(EVENT_2).await;
    assert_eq!(dead[0]["status"], "dead");

    // The old ids are the account's own now: another account may use them.
    let (_, b_key) = s.server.db().create_account("b", None).await.unwrap();
    let body = json!({"id": EVENT_1, "type": "payment.succeeded", "data": {"n": 2}});
    let (status, created) = s
        .api
        .with_key(&b_key)
        .call("POST", "/v1/events", Some(body))
        .await;
    assert_eq!(
        (status, created["id"].as_str()),
        (202, Some(EVENT_1)),
        "{created}"
    );
    s.server.shutdown().await;
    database.drop().await;
}
