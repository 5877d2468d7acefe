//! The OpenAPI document: generated from the code, committed as `docs/openapi.json`, served at
//! `GET /v1/openapi.json`, and true of the running server. `KXP_BLESS=1 cargo test -p
//! kxp-sender openapi` rewrites the committed file after a change to the API.

use std::collections::BTreeSet;

use jsonschema::Validator;
use serde_json::{Value, json};

use crate::support::{Receiver, Reply, sender};

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");

fn generated() -> Value {
    serde_json::to_value(kxp_sender::openapi()).unwrap()
}

fn pretty(doc: &Value) -> String {
    serde_json::to_string_pretty(doc).unwrap() + "\n"
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let generated = pretty(&generated());
    if std::env::var_os("KXP_BLESS").is_some() {
        std::fs::write(COMMITTED, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is not what the code generates: run \
         `KXP_BLESS=1 cargo test -p kxp-sender openapi` and commit the file"
    );
}

/// Every route the router registers is in the document, with each of its methods, and the
/// document names no route the router lacks.
#[test]
fn the_document_describes_exactly_the_routes_served() {
    let source = include_str!("../../src/http/mod.rs");
    let mut served = BTreeSet::new();
    for route in source.split(".route(").skip(1) {
        let path = route.split('"').nth(1).unwrap().to_owned();
        let handlers = route.split(".route(").next().unwrap();
        for method in ["get", "post", "put", "patch", "delete"] {
            if handlers.contains(&format!("{method}(")) {
                served.insert(format!("{method} {path}"));
            }
        }
    }
    let doc = generated();
    let mut described = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            described.insert(format!("{method} {path}"));
        }
    }
    assert_eq!(served, described);
    assert!(served.len() >= 26, "{served:?}");
}

/// A validator for the schema at `pointer` in the document, resolving its `$ref`s against the
/// whole document.
fn validator(doc: &Value, schema: &Value) -> Validator {
    let mut root = doc.clone();
    let object = root.as_object_mut().unwrap();
    for (key, value) in schema.as_object().unwrap() {
        object.insert(key.clone(), value.clone());
    }
    object.insert(
        "$schema".to_owned(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    jsonschema::validator_for(&root).unwrap()
}

fn check(doc: &Value, schema: &Value, instance: &Value, what: &str) {
    let validator = validator(doc, schema);
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{what}: {instance}\n{errors:#?}");
}

#[test]
fn every_documented_example_fits_its_schema() {
    let doc = generated();
    let mut checked = 0;
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        let examples = schema
            .get("examples")
            .and_then(Value::as_array)
            .cloned()
            .into_iter()
            .flatten()
            .chain(schema.get("example").cloned());
        for example in examples {
            let reference = json!({"$ref": format!("#/components/schemas/{name}")});
            check(&doc, &reference, &example, &format!("example of {name}"));
            checked += 1;
        }
    }
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let bodies = operation["requestBody"]["content"]
                .as_object()
                .into_iter()
                .flatten()
                .chain(
                    operation["responses"]
                        .as_object()
                        .unwrap()
                        .values()
                        .filter_map(|r| r["content"].as_object())
                        .flatten(),
                );
            for (_, media) in bodies {
                if let Some(example) = media.get("example") {
                    check(&doc, &media["schema"], example, &format!("{method} {path}"));
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} examples");
}

/// The schema the document gives for `method path` answering `status`.
fn response_schema(doc: &Value, method: &str, path: &str, status: u16) -> Value {
    let response = &doc["paths"][path][method]["responses"][status.to_string()];
    assert!(
        !response.is_null(),
        "{method} {path} answered {status}, which the document does not list"
    );
    response["content"]["application/json"]["schema"].clone()
}

/// Drives a real server through every kind of answer and checks each one against the
/// document: the status is listed for its route, and the body fits the schema given for it.
#[tokio::test]
async fn the_running_server_answers_as_documented() {
    let receiver = Receiver::start(vec![Reply::Status(500), Reply::Status(200)]).await;
    let s = sender("0s,50ms").await;
    let served: Value = reqwest::get(format!("http://{}/v1/openapi.json", s.server.addr()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pretty(&served), pretty(&generated()), "served != generated");
    let doc = served;

    let mut seen = Vec::new();
    let mut call = async |method: &str, template: &str, path: &str, body: Option<Value>| {
        let (status, answer) = s.api.call(&method.to_uppercase(), path, body).await;
        let schema = response_schema(&doc, method, template, status);
        check(
            &doc,
            &schema,
            &answer,
            &format!("{method} {path} → {status}"),
        );
        seen.push(format!("{method} {template} {status}"));
        answer
    };
    let created = call(
        "post",
        "/v1/endpoints",
        "/v1/endpoints",
        Some(json!({"url": receiver.url, "skip_challenge": true, "description": "docs"})),
    )
    .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let ep = format!("/v1/endpoints/{id}");
    call("get", "/v1/endpoints", "/v1/endpoints?limit=1", None).await;
    call("get", "/v1/endpoints/{id}", &ep, None).await;
    call(
        "patch",
        "/v1/endpoints/{id}",
        &ep,
        Some(json!({"rate_limit_per_second": null})),
    )
    .await;
    call(
        "post",
        "/v1/endpoints/{id}/pause",
        &format!("{ep}/pause"),
        None,
    )
    .await;
    call(
        "post",
        "/v1/endpoints/{id}/resume",
        &format!("{ep}/resume"),
        None,
    )
    .await;
    call(
        "get",
        "/v1/endpoints/{id}/health",
        &format!("{ep}/health"),
        None,
    )
    .await;
    call(
        "post",
        "/v1/endpoints/{id}/rotate-secret",
        &format!("{ep}/rotate-secret"),
        Some(json!({"overlap": "1h"})),
    )
    .await;
    call(
        "put",
        "/v1/schemas/{type}/{api_version}",
        "/v1/schemas/order.paid/2026-11-01",
        Some(json!({"type": "object", "required": ["amount"]})),
    )
    .await;
    call("get", "/v1/schemas", "/v1/schemas", None).await;
    call(
        "get",
        "/v1/schemas/{type}/{api_version}",
        "/v1/schemas/order.paid/2026-11-01",
        None,
    )
    .await;
    call(
        "post",
        "/v1/events",
        "/v1/events",
        Some(json!({"type": "order.paid", "data": {}})),
    )
    .await;
    let event = call(
        "post",
        "/v1/events",
        "/v1/events",
        Some(json!({"type": "order.paid", "data": {"amount": 5}})),
    )
    .await;
    let event_id = event["id"].as_str().unwrap().to_owned();
    call(
        "get",
        "/v1/events/{id}",
        &format!("/v1/events/{event_id}"),
        None,
    )
    .await;
    s.api
        .wait_for(&event_id, "delivered", std::time::Duration::from_secs(10))
        .await;
    let deliveries = call(
        "get",
        "/v1/events/{id}/deliveries",
        &format!("/v1/events/{event_id}/deliveries"),
        None,
    )
    .await;
    let delivery = deliveries["data"][0]["id"].as_str().unwrap().to_owned();
    call(
        "get",
        "/v1/deliveries",
        "/v1/deliveries?status=delivered",
        None,
    )
    .await;
    call(
        "get",
        "/v1/deliveries/{id}/attempts",
        &format!("/v1/deliveries/{delivery}/attempts"),
        None,
    )
    .await;
    call(
        "post",
        "/v1/deliveries/{id}/replay",
        &format!("/v1/deliveries/{delivery}/replay"),
        None,
    )
    .await;
    call(
        "post",
        "/v1/endpoints/{id}/replay",
        &format!("{ep}/replay"),
        Some(json!({"status": "delivered"})),
    )
    .await;
    call("get", "/v1/account", "/v1/account", None).await;
    call(
        "patch",
        "/v1/account",
        "/v1/account",
        Some(json!({"contact_email": "ops@example.com"})),
    )
    .await;
    call("get", "/v1/notifications", "/v1/notifications", None).await;
    call(
        "delete",
        "/v1/schemas/{type}/{api_version}",
        "/v1/schemas/order.paid/2026-11-01",
        None,
    )
    .await;
    // Errors: each is listed for its route, and its body is an ErrorBody.
    call("get", "/v1/endpoints/{id}", "/v1/endpoints/ep_nope", None).await;
    call(
        "post",
        "/v1/endpoints",
        "/v1/endpoints",
        Some(json!({"url": "ftp://x"})),
    )
    .await;
    call("get", "/v1/deliveries", "/v1/deliveries?status=lost", None).await;
    call("delete", "/v1/endpoints/{id}", &ep, None).await;
    call(
        "post",
        "/v1/deliveries/{id}/replay",
        &format!("/v1/deliveries/{delivery}/replay"),
        None,
    )
    .await;
    let unauthorized = reqwest::get(format!("http://{}/v1/account", s.server.addr()))
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let body: Value = unauthorized.json().await.unwrap();
    check(
        &doc,
        &response_schema(&doc, "get", "/v1/account", 401),
        &body,
        "401",
    );
    // The ones without a key, answered as documented too.
    for (path, status) in [("/healthz", 200), ("/livez", 200), ("/readyz", 200)] {
        let answer: Value = reqwest::get(format!("http://{}{path}", s.server.addr()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        check(
            &doc,
            &response_schema(&doc, "get", path, status),
            &answer,
            path,
        );
    }
    for expected in [
        "post /v1/events 400",
        "post /v1/endpoints 422",
        "get /v1/endpoints/{id} 404",
        "post /v1/deliveries/{id}/replay 409",
        "get /v1/deliveries 422",
    ] {
        assert!(
            seen.iter().any(|s| s == expected),
            "{expected} not exercised: {seen:#?}"
        );
    }
}
