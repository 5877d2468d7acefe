//! The rows of the store as the API shows them: conversions into [`kxp_api`]'s types, so the
//! server writes exactly what the published contract (and its OpenAPI document) says, and
//! anything else showing a row (`kxp dlq` on the database) shows it the same way.

use kxp_api as api;
use kxp_api::Timestamp;

use crate::store::{ErasureRow, server_certificate};

use crate::model::{
    Account, Attempt, CredentialsView, Delivery, DeliveryStatus, Endpoint, EndpointHealth, HELD,
    LiveSecret, Notification, Rotated, Schema, Window,
};

/// A time in the store (Unix milliseconds) as the API writes it.
pub(crate) fn time(ms: i64) -> Timestamp {
    Timestamp::from_unix_ms(ms)
}

/// A count or a duration that the store keeps signed but is never negative.
fn unsigned<T: TryFrom<i64> + Default>(n: i64) -> T {
    T::try_from(n).unwrap_or_default()
}

impl From<Endpoint> for api::Endpoint {
    fn from(e: Endpoint) -> api::Endpoint {
        let credentials = CredentialsView::of_row(e.credentials_view.as_deref());
        api::Endpoint {
            event_types: e.types().to_vec(),
            filter: e
                .content_filter
                .as_deref()
                .and_then(|filter| serde_json::from_str(filter).ok()),
            url: (!e.is_pull()).then_some(e.url),
            mode: e.mode,
            temporary: e.temporary,
            payload: e.payload_mode,
            id: e.id,
            description: e.description,
            timeout_ms: unsigned(e.timeout_ms),
            status: api::EndpointStatus::parse(e.status.as_str()),
            api_version: e.api_version,
            rate_limit_per_second: e.rate_limit_per_second.map(unsigned),
            circuit_state: api::CircuitState::parse(e.circuit_state.as_str()),
            signing: e.signing.clone(),
            format: e.format.clone(),
            encryption_jwk: e
                .encryption_jwk
                .as_deref()
                .and_then(|jwk| serde_json::from_str(jwk).ok()),
            trace_propagation: e.trace_propagation,
            headers: credentials.headers,
            auth: credentials.auth,
            tls: credentials.tls,
            server_certificate: server_certificate(e.server_certificate.as_deref()),
            created_at: time(e.created_at),
            updated_at: time(e.updated_at),
        }
    }
}

impl From<Rotated> for api::SecretRotated {
    fn from(rotated: Rotated) -> api::SecretRotated {
        api::SecretRotated {
            secret: rotated.secret,
            public_key: rotated.public_key.as_ref().map(public_key),
            previous_expires_at: time(rotated.previous_expires_at),
        }
    }
}

impl From<Delivery> for api::Delivery {
    fn from(d: Delivery) -> api::Delivery {
        api::Delivery {
            // Held for a paused endpoint or an open circuit: no time until it is released.
            next_attempt_at: (d.status == DeliveryStatus::Pending && d.next_attempt_at != HELD)
                .then(|| time(d.next_attempt_at)),
            id: d.id,
            event_id: d.event_id,
            endpoint_id: d.endpoint_id,
            status: api::DeliveryStatus::parse(d.status.as_str()),
            attempts: unsigned(d.attempts),
            last_status: d.last_status.map(unsigned),
            last_error: d.last_error,
            replayed_by: d.replayed_by,
            created_at: time(d.created_at),
            updated_at: time(d.updated_at),
            sequence: d.sequence.map(|n| u64::try_from(n).unwrap_or(0)),
        }
    }
}

impl From<Attempt> for api::Attempt {
    fn from(a: Attempt) -> api::Attempt {
        api::Attempt {
            attempt: unsigned(a.attempt),
            started_at: time(a.started_at),
            duration_ms: unsigned(a.duration_ms),
            status_code: a.status_code.map(unsigned),
            error: a.error,
            response_snippet: a.response_snippet,
        }
    }
}

impl From<Account> for api::Account {
    fn from(a: Account) -> api::Account {
        api::Account {
            id: a.id,
            name: a.name,
            default_api_version: a.default_api_version,
            ops_url: a.ops_url,
            contact_email: a.contact_email,
        }
    }
}

impl From<Notification> for api::Notification {
    fn from(n: Notification) -> api::Notification {
        api::Notification {
            id: n.id,
            endpoint_id: n.endpoint_id,
            kind: api::NotificationKind::parse(&n.kind),
            channel: api::NotificationChannel::parse(&n.channel),
            target: n.target,
            event_id: n.event_id,
            status: api::NotificationStatus::parse(&n.status),
            attempts: unsigned(n.attempts),
            last_error: n.last_error,
            created_at: time(n.created_at),
        }
    }
}

impl From<Schema> for api::Schema {
    fn from(s: Schema) -> api::Schema {
        api::Schema {
            id: s.id,
            event_type: s.event_type,
            api_version: s.api_version,
            // Stored only after it parsed and compiled.
            schema: serde_json::from_str(&s.schema).unwrap_or(serde_json::Value::Null),
            created_at: time(s.created_at),
            updated_at: time(s.updated_at),
        }
    }
}

fn window(w: Window) -> api::HealthWindow {
    api::HealthWindow {
        attempts: unsigned(w.attempts),
        successes: unsigned(w.successes),
        failures: unsigned(w.failures),
        success_rate: w.success_rate,
        latency_p50_ms: w.latency_p50_ms.map(unsigned),
        latency_p95_ms: w.latency_p95_ms.map(unsigned),
    }
}

/// The health view's times are already RFC 3339 text in the model.
fn text_time(text: Option<String>) -> Option<Timestamp> {
    text.and_then(|t| t.parse().ok())
}

/// The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): the algorithm identifier
/// 1.3.101.112 and a 33-byte bit string, then the 32 key bytes.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// An Ed25519 public key in the forms `GET /v1/endpoints/{id}/public-key` and the JWKS serve.
pub(crate) fn public_key(key: &kxp_verify::PublicKey) -> api::PublicKey {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    let bytes = key.to_bytes();
    let mut der = ED25519_SPKI_PREFIX.to_vec();
    der.extend_from_slice(&bytes);
    api::PublicKey {
        public_key: STANDARD.encode(bytes),
        jwk: jwk(key),
        pem: format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            STANDARD.encode(der)
        ),
        whpk: format!("whpk_{}", STANDARD.encode(bytes)),
    }
}

/// The key as a JWK (RFC 8037), its fingerprint as `kid`.
pub(crate) fn jwk(key: &kxp_verify::PublicKey) -> serde_json::Value {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    serde_json::json!({
        "kty": "OKP",
        "crv": "Ed25519",
        "x": URL_SAFE_NO_PAD.encode(key.to_bytes()),
        "kid": key.fingerprint().to_string(),
        "alg": "EdDSA",
        "use": "sig",
    })
}

/// An endpoint with its live secrets (newest first) and the `when_confirmed` rotation under
/// way, if one is: what `GET /v1/endpoints/{id}` answers and the console's endpoint page shows.
pub(crate) fn endpoint_details(endpoint: Endpoint, secrets: &[LiveSecret]) -> api::EndpointDetails {
    let rotation = rotation(&endpoint, secrets);
    api::EndpointDetails {
        endpoint: api::Endpoint::from(endpoint),
        secrets: secrets
            .iter()
            .map(|s| api::SecretState {
                kind: api::Signing::parse(&s.kind),
                format: s.material().map(|m| m.format).unwrap_or_default(),
                fingerprint: s.fingerprint(),
                created_at: time(s.created_at),
                expires_at: s.expires_at.map(time),
                last_verified_at: s.last_verified_at.map(time),
            })
            .collect(),
        rotation,
    }
}

/// The `when_confirmed` rotation under way: its new secret is live and so is an older one.
fn rotation(endpoint: &Endpoint, secrets: &[LiveSecret]) -> Option<api::Rotation> {
    let (Some(id), Some(needed)) = (endpoint.confirm_secret_id, endpoint.confirm_needed) else {
        return None;
    };
    let new = secrets.iter().find(|s| s.id == id)?;
    let older: Vec<&LiveSecret> = secrets.iter().filter(|s| s.id < id).collect();
    let ends_by = older.iter().filter_map(|s| s.expires_at).max()?;
    // The rotation's new material is every row from its first on (a secret and a key, for
    // `both`): a receiver may verify with either.
    let new_verified = secrets
        .iter()
        .filter(|s| s.id >= id)
        .filter_map(|s| s.last_verified_at)
        .max();
    // A verification with an older secret from before the rotation says nothing about now.
    let old_verified = older
        .iter()
        .filter_map(|s| s.last_verified_at)
        .filter(|&at| at >= new.created_at)
        .max();
    let receiver = match (new_verified, old_verified) {
        (Some(new), Some(old)) if old > new => api::ReceiverKey::Old,
        (Some(_), _) => api::ReceiverKey::New,
        (None, Some(_)) => api::ReceiverKey::Old,
        (None, None) => api::ReceiverKey::Unconfirmed,
    };
    Some(api::Rotation {
        expire_old: api::ExpireOld::WhenConfirmed,
        secret: new.fingerprint(),
        confirmations: unsigned(endpoint.confirmations),
        needed: unsigned(needed),
        receiver,
        ends_by: time(ends_by),
    })
}

impl From<EndpointHealth> for api::EndpointHealth {
    fn from(h: EndpointHealth) -> api::EndpointHealth {
        api::EndpointHealth {
            endpoint_id: h.endpoint_id,
            last_1h: window(h.last_1h),
            last_24h: window(h.last_24h),
            consecutive_failures: unsigned(h.consecutive_failures),
            last_success_at: text_time(h.last_success_at),
            last_failure_at: text_time(h.last_failure_at),
            last_error: h.last_error,
            pending: unsigned(h.pending),
            due: unsigned(h.due),
            oldest_due_at: text_time(h.oldest_due_at),
            dead: unsigned(h.dead),
            status: api::EndpointStatus::parse(h.status.as_str()),
            circuit_state: api::CircuitState::parse(h.circuit_state.as_str()),
            circuit_opened_at: text_time(h.circuit_opened_at),
            next_probe_at: text_time(h.next_probe_at),
            failing_since: text_time(h.failing_since),
            server_certificate: h.server_certificate,
            expiring_certificates: h.expiring_certificates,
            pull: h.pull,
        }
    }
}

/// An erasure as the API shows it.
pub(crate) fn erasure(row: ErasureRow) -> api::Erasure {
    api::Erasure {
        id: row.id,
        tag: row.tag,
        status: api::ErasureStatus::parse(&row.status),
        events: u64::try_from(row.events).unwrap_or(0),
        created_at: time(row.created_at),
        finished_at: row.finished_at.map(time),
    }
}
