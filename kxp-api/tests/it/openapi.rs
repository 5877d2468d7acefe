//! The OpenAPI document: it is valid JSON of OpenAPI 3.1, it describes the contract, and every
//! example it documents is read by the type it documents.

use kxp_api::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn document() -> Value {
    serde_json::to_value(openapi()).unwrap()
}

/// The documented example of `name` read into `T` and written back unchanged.
fn example_of<T: Serialize + DeserializeOwned>(doc: &Value, name: &str) {
    let schema = &doc["components"]["schemas"][name];
    let example = schema
        .get("examples")
        .and_then(|e| e.get(0))
        .or_else(|| schema.get("example"))
        .unwrap_or_else(|| panic!("{name} has no example: {schema}"));
    let value: T = serde_json::from_value(example.clone())
        .unwrap_or_else(|e| panic!("{name}'s example does not read: {e}"));
    assert_eq!(&serde_json::to_value(value).unwrap(), example, "{name}");
}

#[test]
fn every_documented_example_is_read_by_its_type() {
    let doc = document();
    example_of::<ErrorBody>(&doc, "ErrorBody");
    example_of::<Endpoint>(&doc, "Endpoint");
    example_of::<NewEndpoint>(&doc, "NewEndpoint");
    example_of::<EndpointPatch>(&doc, "EndpointPatch");
    example_of::<EndpointDeleted>(&doc, "EndpointDeleted");
    example_of::<RotateSecret>(&doc, "RotateSecret");
    example_of::<SecretRotated>(&doc, "SecretRotated");
    example_of::<BulkReplay>(&doc, "BulkReplay");
    example_of::<ReplayQueued>(&doc, "ReplayQueued");
    example_of::<EndpointHealth>(&doc, "EndpointHealth");
    example_of::<HealthWindow>(&doc, "HealthWindow");
    example_of::<ServiceHealth>(&doc, "ServiceHealth");
    example_of::<NewEvent>(&doc, "NewEvent");
    example_of::<Event>(&doc, "Event");
    example_of::<Delivery>(&doc, "Delivery");
    example_of::<Attempt>(&doc, "Attempt");
    example_of::<Account>(&doc, "Account");
    example_of::<AccountPatch>(&doc, "AccountPatch");
    example_of::<Notification>(&doc, "Notification");
    example_of::<Schema>(&doc, "Schema");
    example_of::<SchemaDeleted>(&doc, "SchemaDeleted");
    example_of::<EndpointId>(&doc, "EndpointId");
    example_of::<Timestamp>(&doc, "Timestamp");
}

#[test]
fn the_document_describes_the_contract() {
    let doc = document();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let description = doc["info"]["description"].as_str().unwrap();
    for topic in ["Idempotency-Key", "next_cursor", "\"error\": \"<code>\""] {
        assert!(description.contains(topic), "{topic}");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    // Error codes: the known ones listed, any other string accepted.
    let codes = &doc["components"]["schemas"]["ErrorCode"]["anyOf"];
    let known: Vec<&str> = codes[0]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let expected: Vec<&str> = ErrorCode::KNOWN.iter().map(ErrorCode::as_str).collect();
    assert_eq!(known, expected);
    assert_eq!(codes[1]["type"], "string");
    // PATCH: nullable settings may be null, the others may not; none is required.
    let patch = &doc["components"]["schemas"]["EndpointPatch"];
    assert!(
        patch
            .get("required")
            .is_none_or(|r| r.as_array().unwrap().is_empty()),
        "{patch}"
    );
    assert_eq!(patch["properties"]["url"]["type"], "string", "{patch}");
    assert!(
        patch["properties"]["api_version"]
            .to_string()
            .contains("null"),
        "{patch}"
    );
    // Lists always carry next_cursor.
    let page = &doc["components"]["schemas"]["Page_Delivery"];
    assert!(
        page["required"].to_string().contains("next_cursor"),
        "{page}"
    );
}
