//! Schema versions: schemas registered per (type, api_version) checked at ingestion, the
//! account's default version, and endpoints pinned to one version.

use std::time::Duration;

use kxp_sender::Db;
use serde_json::{Value, json};

use crate::support::{Api, Database, Receiver, sender, typed, value, values};

const VERSION: &str = "2026-11-01";

fn payment_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"amount": {"type": "integer", "minimum": 0}, "note": {"type": "string"}},
        "required": ["amount"]
    })
}

/// Events and deliveries stored, all accounts together.
async fn stored(db: &Db) -> (i64, i64) {
    const EVENTS: &str = "SELECT COUNT(*) FROM kxp_events";
    const DELIVERIES: &str = "SELECT COUNT(*) FROM kxp_deliveries";
    match db {
        Db::Sqlite(pool) => (
            sqlx::query_scalar(EVENTS).fetch_one(pool).await.unwrap(),
            sqlx::query_scalar(DELIVERIES)
                .fetch_one(pool)
                .await
                .unwrap(),
        ),
        Db::Postgres(pool) | Db::Citus(pool) => (
            sqlx::query_scalar(EVENTS).fetch_one(pool).await.unwrap(),
            sqlx::query_scalar(DELIVERIES)
                .fetch_one(pool)
                .await
                .unwrap(),
        ),
    }
}

/// Raw: for the events the server must refuse.
async fn post_event(api: &Api, body: Value) -> (u16, Value) {
    api.call("POST", "/v1/events", Some(body)).await
}

/// Emits `body` (a `NewEvent` as JSON) through the typed client; the event as JSON.
async fn create_event(api: &Api, body: Value) -> Value {
    let event = api
        .client
        .create_event(&typed(body), None)
        .await
        .unwrap_or_else(|e| panic!("POST /v1/events: {e}"));
    value(&event)
}

each_backend!(a_registered_schema_checks_its_events_and_nothing_invalid_is_stored);

/// Register, a valid event delivered, an invalid one refused with nothing stored, the schema
/// replaced and deleted.
async fn a_registered_schema_checks_its_events_and_nothing_invalid_is_stored(database: Database) {
    let s = database.sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let path = format!("/v1/schemas/payment.succeeded/{VERSION}");

    let (created, new) = s
        .api
        .client
        .put_schema("payment.succeeded", VERSION, &payment_schema())
        .await
        .unwrap();
    assert!(new, "201: {created:?}");
    assert_eq!(created.event_type, "payment.succeeded");
    assert_eq!(created.api_version, VERSION);
    assert_eq!(created.schema, payment_schema());
    let created = value(&created);
    let got = s
        .api
        .client
        .schema("payment.succeeded", VERSION)
        .await
        .unwrap();
    assert_eq!(value(&got), created);
    let list = s.api.client.schemas().await.unwrap();
    assert_eq!(values(list.data), vec![created]);

    // Valid (the account's default version applies): stored and delivered.
    let id = s.api.emit("payment.succeeded", json!({"amount": 5})).await;
    s.api
        .wait_for(&id, "delivered", Duration::from_secs(10))
        .await;
    let before = stored(s.server.db()).await;

    // Invalid: 400 with the path, nothing stored.
    let (status, error) = post_event(
        &s.api,
        json!({"type": "payment.succeeded", "data": {"amount": "five"}}),
    )
    .await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"], "schema_violation");
    assert_eq!(error["path"], "/amount");
    assert!(
        error["message"].as_str().unwrap().contains("/amount"),
        "{error}"
    );
    let (status, error) = post_event(
        &s.api,
        json!({"type": "payment.succeeded", "api_version": VERSION, "data": {"note": "x"}}),
    )
    .await;
    assert_eq!((status, error["path"].as_str()), (400, Some("")), "{error}");
    assert!(error["message"].as_str().unwrap().contains("amount"));
    assert_eq!(stored(s.server.db()).await, before, "no event, no delivery");

    // Another version, or another type, has no schema: accepted as before.
    create_event(
        &s.api,
        json!({"type": "payment.succeeded", "api_version": "2027-01-01", "data": {"amount": "five"}}),
    )
    .await;
    s.api
        .emit("payment.failed", json!({"amount": "five"}))
        .await;

    // Replaced (200), then the new schema applies at once; deleted, then nothing is checked.
    let (_, new) = s
        .api
        .client
        .put_schema(
            "payment.succeeded",
            VERSION,
            &json!({"type": "object", "required": ["currency"]}),
        )
        .await
        .unwrap();
    assert!(!new, "replaced: 200");
    let (status, error) = post_event(
        &s.api,
        json!({"type": "payment.succeeded", "data": {"amount": 5}}),
    )
    .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (400, Some("schema_violation"))
    );
    s.api
        .client
        .delete_schema("payment.succeeded", VERSION)
        .await
        .unwrap();
    let (status, _) = s.api.call("GET", &path, None).await;
    assert_eq!(status, 404);
    let (status, _) = s.api.call("DELETE", &path, None).await;
    assert_eq!(status, 404);
    s.api.emit("payment.succeeded", json!({"amount": 5})).await;
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_invalid_schema_is_refused_with_the_problem() {
    let s = sender("0s").await;
    let path = "/v1/schemas/payment.succeeded/v1";
    for (schema, names) in [
        (json!({"type": "integer", "minimum": "zero"}), "minimum"),
        (
            json!({"properties": {"amount": {"type": "money"}}}),
            "money",
        ),
        (json!(42), "object or a boolean"),
        // Remote references are never fetched.
        (json!({"$ref": "http://127.0.0.1:1/schema.json"}), "http"),
        (json!({"$ref": "file:///etc/passwd"}), "file"),
    ] {
        let (status, error) = s.api.call("PUT", path, Some(schema.clone())).await;
        assert_eq!(status, 422, "{schema}: {error}");
        assert_eq!(error["error"], "invalid_schema", "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(names),
            "{schema}: {error}"
        );
    }
    let (status, _) = s
        .api
        .call("PUT", "/v1/schemas/bad type/v1", Some(json!({})))
        .await;
    assert_eq!(status, 422);
    let list = s.api.client.schemas().await.unwrap();
    assert!(list.data.is_empty(), "nothing stored: {list:?}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn another_account_neither_sees_nor_changes_nor_is_checked_by_your_schemas() {
    let s = sender("0s").await;
    let (_, b_key) = s.server.db().create_account("b", None).await.unwrap();
    let b = s.api.with_key(&b_key);
    let path = format!("/v1/schemas/payment.succeeded/{VERSION}");
    let (_, new) = s
        .api
        .client
        .put_schema("payment.succeeded", VERSION, &payment_schema())
        .await
        .unwrap();
    assert!(new);

    let list = b.client.schemas().await.unwrap();
    assert!(list.data.is_empty(), "{list:?}");
    assert_eq!(b.call("GET", &path, None).await.0, 404);
    assert_eq!(b.call("DELETE", &path, None).await.0, 404);
    // B's events are not checked against A's schema.
    b.emit("payment.succeeded", json!({"amount": "five"})).await;
    // B's PUT of the same name is B's own schema; A's is untouched.
    let (_, new) = b
        .client
        .put_schema("payment.succeeded", VERSION, &json!({"type": "array"}))
        .await
        .unwrap();
    assert!(new);
    let a_schema = s
        .api
        .client
        .schema("payment.succeeded", VERSION)
        .await
        .unwrap();
    assert_eq!(a_schema.schema, payment_schema());
    s.api.emit("payment.succeeded", json!({"amount": 1})).await;
    s.server.shutdown().await;
}

each_backend!(a_pinned_endpoint_receives_only_its_version);
on_citus!(
    a_registered_schema_checks_its_events_and_nothing_invalid_is_stored,
    a_pinned_endpoint_receives_only_its_version
);

/// A pinned endpoint gets only its version's events, an unpinned one every version.
async fn a_pinned_endpoint_receives_only_its_version(database: Database) {
    let s = database.sender("0s").await;
    let old = Receiver::start(vec![]).await;
    let all = Receiver::start(vec![]).await;
    let (pinned, _) = s
        .api
        .endpoint(
            &old.url,
            json!({"api_version": VERSION, "event_types": ["order.*"]}),
        )
        .await;
    let (unpinned, _) = s
        .api
        .endpoint(&all.url, json!({"event_types": ["order.*"]}))
        .await;

    // The account's default version is the event's when it names none.
    let v1 = create_event(&s.api, json!({"type": "order.paid", "data": {}})).await;
    assert_eq!(v1["api_version"], VERSION);
    let v2 = create_event(
        &s.api,
        json!({"type": "order.paid", "api_version": "2027-01-01", "data": {}}),
    )
    .await;
    assert_eq!(v2["api_version"], "2027-01-01");

    let (pinned, unpinned, api) = (&pinned, &unpinned, &s.api);
    let endpoints_of = |event: Value| async move {
        let id = event["id"].as_str().unwrap().to_owned();
        let mut endpoints: Vec<String> = api
            .deliveries_of(&id)
            .await
            .iter()
            .map(|d| d["endpoint_id"].as_str().unwrap().to_owned())
            // Endpoints of other scenarios on the same account aside.
            .filter(|e| e == pinned || e == unpinned)
            .collect();
        endpoints.sort();
        (id, endpoints)
    };
    let (v1_id, v1_endpoints) = endpoints_of(v1).await;
    let (v2_id, v2_endpoints) = endpoints_of(v2).await;
    let mut both = vec![pinned.clone(), unpinned.clone()];
    both.sort();
    assert_eq!(v1_endpoints, both);
    assert_eq!(v2_endpoints, vec![unpinned.clone()]);

    s.api
        .wait_for(&v2_id, "delivered", Duration::from_secs(10))
        .await;
    let start = std::time::Instant::now();
    while all.seen().len() < 2 || old.seen().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen_by_pinned: Vec<String> = old.seen().iter().map(|r| r.event_id()).collect();
    assert_eq!(seen_by_pinned, vec![v1_id]);

    // Unpinned again (PATCH null): it takes every version.
    s.api
        .client
        .update_endpoint(
            &pinned.as_str().into(),
            &typed(json!({"api_version": null})),
        )
        .await
        .unwrap();
    let v3 = create_event(
        &s.api,
        json!({"type": "order.paid", "api_version": "2027-01-01", "data": {}}),
    )
    .await;
    assert_eq!(endpoints_of(v3).await.1, both);
    s.server.shutdown().await;
}
