//! Every type against JSON literals shaped exactly as kxp-sender writes them today (its
//! `EndpointView`, `DeliveryView`, `AttemptView`, `AccountView`, `NotificationView`,
//! `schema_json`, the `json!` answers of delete, rotate and replay): each must read and write
//! back the same JSON, `null`s and absent fields included.

use kxp_api::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Reads `wire`, writes it back, and checks nothing was added, dropped or turned into `null`.
fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug>(wire: Value) -> T {
    let value: T = serde_json::from_value(wire.clone()).unwrap_or_else(|e| panic!("{e}: {wire}"));
    assert_eq!(serde_json::to_value(&value).unwrap(), wire, "{value:?}");
    value
}

fn endpoint_json() -> Value {
    json!({
        "id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
        "url": "http://127.0.0.1:4000/hook",
        "mode": "push",
        "temporary": false,
        "payload": "full",
        "description": "",
        "event_types": ["*"],
        "filter": null,
        "timeout_ms": 5000,
        "status": "active",
        "api_version": null,
        "rate_limit_per_second": null,
        "circuit_state": "closed",
        "signing": "hmac",
        "format": "kxp",
        "encryption_jwk": null,
        "trace_propagation": true,
        "headers": [],
        "auth": null,
        "tls": null,
        "server_certificate": null,
        "created_at": "2026-11-30T01:02:03Z",
        "updated_at": "2026-11-30T01:02:03Z"
    })
}

fn delivery_json() -> Value {
    json!({
        "id": "dlv_0193a0c4c1e07c2e9f3b7a1d2c4e5f63",
        "event_id": "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62",
        "endpoint_id": "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61",
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": null,
        "last_status": null,
        "last_error": null,
        "replayed_by": null,
        "created_at": "2026-11-30T01:02:03Z",
        "updated_at": "2026-11-30T01:02:03Z",
        "sequence": 7
    })
}

#[test]
fn endpoint() {
    let endpoint: Endpoint = round_trip(endpoint_json());
    assert_eq!(endpoint.status, EndpointStatus::Active);
    assert_eq!(endpoint.circuit_state, CircuitState::Closed);
    let mut pinned = endpoint_json();
    pinned["api_version"] = json!("2026-11-01");
    pinned["rate_limit_per_second"] = json!(50);
    pinned["circuit_state"] = json!("half_open");
    pinned["status"] = json!("disabled");
    let pinned: Endpoint = round_trip(pinned);
    assert_eq!(pinned.rate_limit_per_second, Some(50));
    assert_eq!(pinned.circuit_state, CircuitState::HalfOpen);
}

#[test]
fn a_created_endpoint_carries_its_secret_and_debug_hides_it() {
    let mut wire = endpoint_json();
    wire["secret"] = json!("4f0c1d9e2b7a3c5d6e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9012a3b4c5d6");
    wire["public_key"] = json!(null);
    let created: EndpointCreated = round_trip(wire);
    assert_eq!(created.endpoint.id, "ep_0193a0c4c1e07c2e9f3b7a1d2c4e5f61");
    assert!(
        created
            .secret
            .as_ref()
            .unwrap()
            .expose()
            .starts_with("4f0c")
    );
    assert!(!format!("{created:?}").contains("4f0c1d9e"));
    // An Ed25519 endpoint has a public key and no secret.
    let mut wire = endpoint_json();
    wire["signing"] = json!("ed25519");
    wire["secret"] = json!(null);
    wire["public_key"] =
        json!({"public_key": "AA==", "jwk": {"kty": "OKP"}, "pem": "p", "whpk": "whpk_AA=="});
    let created: EndpointCreated = round_trip(wire);
    assert_eq!(created.endpoint.signing, Signing::Ed25519);
    assert_eq!(created.public_key.unwrap().whpk, "whpk_AA==");
}

#[test]
fn an_update_carries_the_rotation_a_change_of_format_made() {
    let mut wire = endpoint_json();
    wire["rotated"] = json!(null);
    let updated: EndpointUpdated = round_trip(wire.clone());
    assert_eq!(updated.rotated, None);
    wire["format"] = json!("standard-webhooks");
    wire["rotated"] = json!({
        "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "public_key": null,
        "previous_expires_at": "2026-12-01T10:00:00Z"
    });
    let updated: EndpointUpdated = round_trip(wire);
    assert_eq!(updated.endpoint.format, Format::StandardWebhooks);
    let rotated = updated.rotated.unwrap();
    assert_eq!(
        rotated.secret.unwrap().expose(),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    );
    // From a server that predates formats: `kxp`, and a format it does not know reads too.
    let mut old = endpoint_json();
    old.as_object_mut().unwrap().remove("format");
    let endpoint: Endpoint = serde_json::from_value(old).unwrap();
    assert_eq!(endpoint.format, Format::Kxp);
    let mut newer = endpoint_json();
    newer["format"] = json!("cloudevents");
    let endpoint: Endpoint = round_trip(newer);
    assert!(!endpoint.format.is_known());
}

#[test]
fn endpoint_deleted_rotated_replayed() {
    let deleted: EndpointDeleted = round_trip(json!({
        "id": "ep_1", "status": "deleted", "dead_deliveries": 2
    }));
    assert_eq!(deleted.status, EndpointStatus::Deleted);
    let rotated: SecretRotated = round_trip(json!({
        "secret": "ab".repeat(32), "public_key": null, "previous_expires_at": "2026-12-01T10:00:00Z"
    }));
    assert_eq!(
        rotated.previous_expires_at.unix_ms(),
        Some(1_796_119_200_000)
    );
    assert_eq!(format!("{rotated:?}").matches("abab").count(), 0);
    let queued: ReplayQueued = round_trip(json!({"queued": 3}));
    assert_eq!(queued.queued, 3);
    let tested: FilterTested = round_trip(json!({
        "tested": 2, "matched": 1, "matches": ["6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62"]
    }));
    assert_eq!(
        tested.matches[0].as_str(),
        "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62"
    );
    // A dry run's request writes only what is given; an empty one is `{}`.
    assert_eq!(
        serde_json::to_value(TestFilter::default()).unwrap(),
        json!({})
    );
    let test: TestFilter = round_trip(json!({"filter": {"tags": "vip"}, "limit": 10}));
    assert_eq!(test.limit, Some(10));
}

#[test]
fn new_endpoint_writes_only_what_is_given() {
    let new = NewEndpoint::new("https://merchant.example/hook");
    assert_eq!(
        serde_json::to_value(&new).unwrap(),
        json!({"url": "https://merchant.example/hook"})
    );
    let mut full = NewEndpoint::new("https://merchant.example/hook");
    full.event_types = Some(vec!["payment.*".into()]);
    full.description = Some("orders".into());
    full.timeout_ms = Some(2500);
    full.api_version = Some("2026-11-01".into());
    full.rate_limit_per_second = Some(10);
    full.skip_challenge = true;
    round_trip::<NewEndpoint>(serde_json::to_value(&full).unwrap());
    // What the server accepts today: `null` for the optional fields means the default.
    let nulls: NewEndpoint =
        serde_json::from_value(json!({"url": "https://x.example", "event_types": null})).unwrap();
    assert_eq!(nulls.event_types, None);
    // ...and unknown fields are refused, as the server refuses them.
    assert!(serde_json::from_value::<NewEndpoint>(json!({"url": "https://x", "urls": 1})).is_err());
}

#[test]
fn endpoint_patch_tells_absent_from_null() {
    // Absent: nothing is written.
    assert_eq!(
        serde_json::to_value(EndpointPatch::default()).unwrap(),
        json!({})
    );
    // Cleared: `null` is written; set: the value.
    let mut patch = EndpointPatch::default();
    patch.api_version = Patch::Clear;
    patch.rate_limit_per_second = Patch::Set(20);
    patch.description = Some("eu".into());
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!({"api_version": null, "rate_limit_per_second": 20, "description": "eu"})
    );
    // Read back the same three ways.
    let read: EndpointPatch = round_trip(json!({"api_version": null, "timeout_ms": 1000}));
    assert_eq!(read.api_version, Patch::Clear);
    assert_eq!(read.rate_limit_per_second, Patch::Unchanged);
    assert_eq!(read.timeout_ms, Some(1000));
    assert_eq!(read.api_version.clone().into_option(), Some(None));
    // `null` is refused for the fields that cannot be cleared, as the server refuses it.
    for field in ["url", "event_types", "description", "timeout_ms"] {
        let refused = serde_json::from_value::<EndpointPatch>(json!({field: null}));
        assert!(refused.is_err(), "{field}: null was accepted");
    }
}

#[test]
fn account_and_its_patch() {
    let wire = json!({
        "id": "acc_0193a0c4c1e07c2e9f3b7a1d2c4e5f60",
        "name": "default",
        "default_api_version": "2026-11-01",
        "ops_url": null,
        "contact_email": null
    });
    let account: Account = round_trip(wire.clone());
    assert_eq!(account.ops_url, None);
    // PATCH answers the same fields, plus `ops_secret` only when `ops_url` was set.
    let updated: AccountUpdated = round_trip(wire.clone());
    assert!(updated.ops_secret.is_none());
    let mut with_secret = wire;
    with_secret["ops_url"] = json!("https://ops.example/kxp");
    with_secret["ops_secret"] = json!("cd".repeat(32));
    let updated: AccountUpdated = round_trip(with_secret);
    assert_eq!(updated.ops_secret.unwrap().expose(), "cd".repeat(32));

    let mut patch = AccountPatch::default();
    patch.ops_url = Patch::Set("https://ops.example/kxp".into());
    patch.contact_email = Patch::Clear;
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!({"ops_url": "https://ops.example/kxp", "contact_email": null})
    );
    let read: AccountPatch = round_trip(json!({"contact_email": null}));
    assert_eq!(read.contact_email, Patch::Clear);
    assert_eq!(read.ops_url, Patch::Unchanged);
    assert!(serde_json::from_value::<AccountPatch>(json!({"name": null})).is_err());
}

#[test]
fn events_keep_data_byte_for_byte() {
    // The envelope as ingestion stores it, with `data` exactly as the platform sent it.
    let text = r#"{"id":"6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{"z": 1, "amount":4200.50,"a":[ ]}}"#;
    let event: Event = serde_json::from_str(text).unwrap();
    assert_eq!(event.data.get(), r#"{"z": 1, "amount":4200.50,"a":[ ]}"#);
    assert_eq!(serde_json::to_string(&event).unwrap(), text);
    assert_eq!(event.event_type, "payment.succeeded");

    let new = NewEvent::new("payment.succeeded", &json!({"amount": 4200})).unwrap();
    assert_eq!(
        serde_json::to_value(&new).unwrap(),
        json!({"type": "payment.succeeded", "data": {"amount": 4200}})
    );
    let pinned = NewEvent::raw("a.b", RawJson::from_string("[1, 2]".into()).unwrap())
        .api_version("2027-01-01");
    assert_eq!(
        serde_json::to_string(&pinned).unwrap(),
        r#"{"type":"a.b","data":[1, 2],"api_version":"2027-01-01"}"#
    );
    assert!(serde_json::from_value::<NewEvent>(json!({"type": "a", "data": 1, "x": 1})).is_err());
}

#[test]
fn deliveries_and_attempts() {
    let held: Delivery = round_trip(delivery_json());
    assert_eq!(held.next_attempt_at, None);
    let mut dead = delivery_json();
    dead["status"] = json!("dead");
    dead["attempts"] = json!(8);
    dead["last_status"] = json!(503);
    dead["last_error"] = json!("http_503");
    dead["replayed_by"] = json!("dlv_2");
    let dead: Delivery = round_trip(dead);
    assert_eq!(dead.status, DeliveryStatus::Dead);
    assert_eq!(dead.replayed_by, Some(DeliveryId::from("dlv_2")));
    let mut due = delivery_json();
    due["next_attempt_at"] = json!("2026-11-30T01:02:33Z");
    round_trip::<Delivery>(due);
    // Not numbered yet; and from a server before sequences, without the field at all.
    let mut unnumbered = delivery_json();
    unnumbered["sequence"] = Value::Null;
    assert_eq!(round_trip::<Delivery>(unnumbered.clone()).sequence, None);
    unnumbered.as_object_mut().unwrap().remove("sequence");
    let old: Delivery = serde_json::from_value(unnumbered).unwrap();
    assert_eq!(old.sequence, None);

    round_trip::<Attempt>(json!({
        "attempt": 1, "started_at": "2026-11-30T01:02:03Z", "duration_ms": 41,
        "status_code": 503, "error": "http_503", "response_snippet": "answer"
    }));
    round_trip::<Attempt>(json!({
        "attempt": 2, "started_at": "2026-11-30T01:02:04Z", "duration_ms": 5000,
        "status_code": null, "error": "timeout", "response_snippet": null
    }));
}

#[test]
fn feed_pages_and_the_purged_error() {
    let page: FeedPage = round_trip(json!({
        "endpoint_id": "ep_1", "latest": 9,
        "items": [{"sequence": 8, "event_id": "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62",
            "event_type": "t", "body": "{}", "headers": {"x-kxp-signature": "t=1,v1=ab"}}]
    }));
    assert_eq!(page.items[0].sequence, 8);
    let purged: ErrorBody = round_trip(json!({
        "error": "sequence_purged", "message": "numbers 1 to 3 were purged", "earliest": 4
    }));
    assert_eq!((purged.error.status(), purged.earliest), (410, Some(4)));
    round_trip::<FeedToken>(json!({"token": "kxpft_1"}));
    assert_eq!(
        serde_json::to_value(FeedQuery::after(3, 100)).unwrap(),
        json!({"after": 3, "limit": 100})
    );
}

#[test]
fn pages_always_carry_next_cursor() {
    let last: Page<Delivery> = round_trip(json!({"data": [delivery_json()], "next_cursor": null}));
    assert_eq!(last.next_cursor, None);
    let more: Page<Endpoint> =
        round_trip(json!({"data": [endpoint_json()], "next_cursor": "ep_9"}));
    assert_eq!(more.next_cursor, Some(Cursor::from("ep_9")));
    round_trip::<Page<Attempt>>(json!({"data": [], "next_cursor": null}));
}

#[test]
fn queries_write_only_what_is_given() {
    assert_eq!(
        serde_json::to_value(PageQuery::default()).unwrap(),
        json!({})
    );
    let query = DeliveryQuery::dead()
        .endpoint(EndpointId::from("ep_1"))
        .limit(100)
        .after(Some(Cursor::from("dlv_7")));
    assert_eq!(
        serde_json::to_value(&query).unwrap(),
        json!({"status": "dead", "endpoint_id": "ep_1", "cursor": "dlv_7", "limit": 100})
    );
    assert_eq!(
        serde_json::to_value(BulkReplay::status(DeliveryStatus::Delivered)).unwrap(),
        json!({"status": "delivered"})
    );
    assert_eq!(
        serde_json::to_value(RotateSecret::default()).unwrap(),
        json!({})
    );
    assert_eq!(
        serde_json::to_value(RotateSecret::overlap("0s")).unwrap(),
        json!({"overlap": "0s"})
    );
}

#[test]
fn notifications() {
    let n: Notification = round_trip(json!({
        "id": "ntf_1", "endpoint_id": "ep_1", "kind": "endpoint.circuit_opened",
        "channel": "webhook", "target": "https://ops.example/kxp",
        "event_id": "0c6f9a1e-3b2d-4f5e-8a7b-1c2d3e4f5a6b", "status": "failed",
        "attempts": 3, "last_error": "http_500", "created_at": "2026-11-30T01:02:03Z"
    }));
    assert_eq!(n.kind, NotificationKind::CircuitOpened);
    assert_eq!(n.channel, NotificationChannel::Webhook);
    assert_eq!(n.status, NotificationStatus::Failed);
    let email: Notification = round_trip(json!({
        "id": "ntf_2", "endpoint_id": "ep_1", "kind": "endpoint.disabled",
        "channel": "email", "target": "ops@example.com", "event_id": "e",
        "status": "pending", "attempts": 0, "last_error": null,
        "created_at": "2026-11-30T01:02:03Z"
    }));
    assert_eq!(email.kind, NotificationKind::Disabled);
}

#[test]
fn schemas() {
    let schema: Schema = round_trip(json!({
        "id": "sch_1", "type": "payment.succeeded", "api_version": "2026-11-01",
        "schema": {"type": "object", "required": ["amount"]},
        "created_at": "2026-11-30T01:02:03Z", "updated_at": "2026-11-30T01:02:03Z"
    }));
    assert_eq!(schema.event_type, "payment.succeeded");
    round_trip::<Schema>(json!({
        "id": "sch_2", "type": "a", "api_version": "v", "schema": true,
        "created_at": "2026-11-30T01:02:03Z", "updated_at": "2026-11-30T01:02:03Z"
    }));
    round_trip::<SchemaDeleted>(
        json!({"deleted": true, "type": "payment.succeeded", "api_version": "2026-11-01"}),
    );
}

#[test]
fn health() {
    let window = json!({"attempts": 8, "successes": 3, "failures": 5, "success_rate": 0.375,
                        "latency_p50_ms": 10, "latency_p95_ms": 500});
    let empty = json!({"attempts": 0, "successes": 0, "failures": 0, "success_rate": null,
                       "latency_p50_ms": null, "latency_p95_ms": null});
    let health: EndpointHealth = round_trip(json!({
        "endpoint_id": "ep_1", "last_1h": empty, "last_24h": window,
        "consecutive_failures": 2, "last_success_at": null,
        "last_failure_at": "2026-11-30T04:26:59Z", "last_error": "http_503",
        "pending": 4, "due": 0, "oldest_due_at": null, "dead": 1, "status": "paused", "circuit_state": "open",
        "circuit_opened_at": "2026-11-30T04:20:00Z", "next_probe_at": "2026-11-30T04:30:00Z",
        "failing_since": "2026-11-30T04:00:00Z",
        "server_certificate": {"issuer": "CN=R11", "not_after": "2026-12-09T08:30:00Z",
                               "seen_at": "2026-11-30T04:27:00Z"},
        "expiring_certificates": [{"certificate": "server", "not_after": "2026-12-09T08:30:00Z",
                                   "days_left": 9}],
        "pull": null
    }));
    assert_eq!(
        health.expiring_certificates[0].certificate,
        CertificateRole::Server
    );
    assert_eq!(health.last_24h.success_rate, Some(0.375));
    assert_eq!(health.circuit_state, CircuitState::Open);
    round_trip::<ServiceHealth>(json!({"status": "ok", "database": "postgres", "sources": []}));
    let with_sources: ServiceHealth = round_trip(json!({"status": "ok", "database": "sqlite",
        "sources": [{"name": "amqp:/payments", "state": "down", "lag": null,
                     "last_error": "the connection to the server was lost"}]}));
    assert_eq!(with_sources.sources[0].state, "down");
    // A server from before the sources: none.
    let older: ServiceHealth =
        serde_json::from_value(json!({"status": "ok", "database": "postgres"})).unwrap();
    assert!(older.sources.is_empty());
}

#[test]
fn errors() {
    let body: ErrorBody = round_trip(json!({"error": "not_found", "message": "no such resource"}));
    assert_eq!(body.error, ErrorCode::NotFound);
    assert_eq!(body.error.status(), 404);
    // schema_violation alone carries `path`.
    let violation: ErrorBody = round_trip(json!({
        "error": "schema_violation", "message": "data/amount does not match", "path": "/amount"
    }));
    assert_eq!(violation.path.as_deref(), Some("/amount"));
    let unknown: ErrorBody = round_trip(json!({"error": "brand_new", "message": "m"}));
    assert_eq!(unknown.error.as_str(), "brand_new");
}

#[test]
fn vocabularies_keep_values_they_do_not_know() {
    let status: DeliveryStatus = serde_json::from_value(json!("archived")).unwrap();
    assert_eq!(status, DeliveryStatus::Unknown("archived".into()));
    assert_eq!(serde_json::to_value(&status).unwrap(), json!("archived"));
    for known in DeliveryStatus::KNOWN {
        assert_eq!(known.as_str().parse::<DeliveryStatus>().unwrap(), *known);
    }
    assert_eq!(CircuitState::HalfOpen.to_string(), "half_open");
    assert_eq!(NotificationKind::Disabled.as_str(), "endpoint.disabled");
}

#[test]
fn ids_and_timestamps() {
    let id: EndpointId = "ep_1".parse().unwrap();
    assert_eq!(id.as_str(), "ep_1");
    assert_eq!(id.to_string(), "ep_1");
    assert_eq!(serde_json::to_value(&id).unwrap(), json!("ep_1"));
    // Event ids have no prefix; ids are never refused.
    let event: EventId =
        serde_json::from_value(json!("6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62")).unwrap();
    assert_eq!(String::from(event), "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62");

    // The server's form: whole seconds, UTC.
    let t = Timestamp::from_unix_ms(1_764_464_523_999);
    assert_eq!(t.as_str(), "2025-11-30T01:02:03Z");
    assert_eq!(t.unix_ms(), Some(1_764_464_523_000));
    assert_eq!(
        Timestamp::from_unix_ms(i64::MAX).as_str(),
        "9999-12-31T23:59:59Z"
    );
    assert_eq!(
        Timestamp::from_unix_ms(i64::MIN).as_str(),
        "0000-01-01T00:00:00Z"
    );
    assert!("yesterday".parse::<Timestamp>().is_err());
    assert!("2026-11-30T01:02:03.5+01:00".parse::<Timestamp>().is_ok());
}

#[test]
fn an_endpoint_from_a_server_before_trace_propagation_reads_as_propagating() {
    let mut wire = endpoint_json();
    wire.as_object_mut().unwrap().remove("trace_propagation");
    let endpoint: Endpoint = serde_json::from_value(wire).unwrap();
    assert!(endpoint.trace_propagation);
}

#[test]
fn an_endpoint_with_credentials_shows_their_names_and_redacts_their_values() {
    let mut wire = endpoint_json();
    wire["headers"] = json!(["X-Gateway-Key"]);
    wire["auth"] = json!({
        "type": "oauth2_client_credentials",
        "token_url": "https://auth.merchant.example/oauth/token",
        "client_id": "kxp",
        "client_secret": "redacted",
        "scope": null,
        "audience": "https://merchant.example",
        "client_auth": "post"
    });
    wire["tls"] = json!({
        "client_certificate": {
            "subject": "CN=kxp-webhooks",
            "issuer": "CN=Merchant Private CA",
            "not_after": "2027-06-01T00:00:00Z",
            "sha256": "00ff"
        },
        "ca_certificates": []
    });
    let endpoint: Endpoint = round_trip(wire);
    assert_eq!(endpoint.auth.unwrap().kind(), "oauth2_client_credentials");
    assert_eq!(
        endpoint.tls.unwrap().client_certificate.unwrap().subject,
        "CN=kxp-webhooks"
    );
    for auth in [
        json!({"type": "basic", "username": "m", "password": "redacted"}),
        json!({"type": "bearer", "token": "redacted"}),
    ] {
        round_trip::<EndpointAuthView>(auth);
    }
}
