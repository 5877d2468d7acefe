//! The HTTP API: JSON over `Authorization: Bearer <api key>`, every route scoped to the
//! caller's account (another account's ids answer 404, exactly like ids that do not exist).

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::Notify;

mod account;

use crate::circuit::Protection;
use crate::db::{Db, ms, sha256_hex};
use crate::dispatch::{self, GuardedClient};
use crate::guard::{AddressGuard, Blocked};
use crate::metrics::Metrics;
use crate::schedule::parse_duration;
use crate::schemas::{Schema, SchemaCache};
use crate::store::{
    Account, Attempt, Delivery, DeliveryFilter, Endpoint, EndpointChanges, HELD, Ingested,
    NewEndpoint as StoredEndpoint, StoreError, parse_rfc3339, rfc3339,
};

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The database.
    pub db: Db,
    /// Poked after ingestion and replays, so in-process workers start at once.
    pub wake: Arc<Notify>,
    /// Policy for new endpoints.
    pub settings: Arc<ApiSettings>,
    /// Compiled event schemas.
    pub schemas: Arc<SchemaCache>,
    /// This process's counters, for `/metrics`.
    pub metrics: Arc<Metrics>,
}

/// Policy the API enforces.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Development mode: `http://` endpoint URLs are accepted (and the guard lets loopback
    /// through).
    pub dev: bool,
    /// Refuses endpoint URLs whose host is an address in a blocked range.
    pub guard: AddressGuard,
    /// The HTTP client of the endpoint challenge, built around the same guard as the workers'
    /// ([`dispatch::client`]).
    pub client: GuardedClient,
    /// The timeout of an endpoint created without one.
    pub default_timeout: Duration,
    /// The default rate limit (resuming an endpoint releases its backlog at its rate).
    pub protection: Protection,
}

/// The longest per-endpoint timeout: long enough for a receiver on another continent.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest per-endpoint timeout.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest overlap of a secret rotation: a week to deploy the new secret everywhere. A
/// secret that stays valid longer is not rotated, only shared.
pub const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The overlap of a rotation that names none.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 60 * 60);

/// The highest `rate_limit_per_second` an endpoint can be given.
pub const MAX_RATE_LIMIT: i64 = 10_000;

const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

/// The router: `/v1/…`, and `/healthz`.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/endpoints", post(create_endpoint).get(list_endpoints))
        .route(
            "/v1/endpoints/{id}",
            get(get_endpoint)
                .patch(patch_endpoint)
                .delete(delete_endpoint),
        )
        .route("/v1/endpoints/{id}/pause", post(pause_endpoint))
        .route("/v1/endpoints/{id}/resume", post(resume_endpoint))
        .route("/v1/endpoints/{id}/rotate-secret", post(rotate_secret))
        .route("/v1/endpoints/{id}/replay", post(replay_endpoint))
        .route("/v1/endpoints/{id}/health", get(endpoint_health))
        .route("/v1/events", post(create_event))
        .route("/v1/events/{id}", get(get_event))
        .route("/v1/events/{id}/deliveries", get(event_deliveries))
        .route("/v1/deliveries", get(list_deliveries))
        .route("/v1/deliveries/{id}/attempts", get(delivery_attempts))
        .route("/v1/deliveries/{id}/replay", post(replay_delivery))
        .route(
            "/v1/account",
            get(account::get_account).patch(account::patch_account),
        )
        .route("/v1/notifications", get(account::list_notifications))
        .route("/v1/schemas", get(list_schemas))
        .route(
            "/v1/schemas/{type}/{api_version}",
            get(get_schema).put(put_schema).delete(delete_schema),
        )
        .with_state(state)
}

// ---- errors ----

/// An API error: `{"error": "<code>", "message": "…"}` with its status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": self.code, "message": self.message})),
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
            }
            StoreError::Conflict { code, message } => {
                ApiError::new(StatusCode::CONFLICT, code, message)
            }
            StoreError::Database(e) => {
                tracing::error!(target: "kxp_sender", error = %e, "database error in the API");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the database is unavailable; retry",
                )
            }
        }
    }
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let code = if e.is_data() {
            "invalid_request"
        } else {
            "invalid_json"
        };
        let status = if e.is_data() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError::new(status, code, e.to_string())
    })
}

// ---- authentication ----

/// The caller's account, from `Authorization: Bearer <key>`.
pub struct Authed(pub Account);

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let unauthorized = || {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid `Authorization: Bearer <api key>` header is required",
            )
        };
        let key = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or_else(unauthorized)?;
        state
            .db
            .account_by_key(key)
            .await?
            .map(Authed)
            .ok_or_else(unauthorized)
    }
}

// ---- pagination ----

#[derive(Deserialize)]
struct Page {
    cursor: Option<String>,
    limit: Option<i64>,
}

impl Page {
    fn limit(&self) -> Result<i64, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_PAGE),
            Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            Some(_) => Err(ApiError::invalid(format!(
                "limit must be between 1 and {MAX_PAGE}"
            ))),
        }
    }
}

fn list<T: Serialize>(items: Vec<T>, limit: i64, cursor: impl Fn(&T) -> String) -> Json<Value> {
    let full = i64::try_from(items.len()).unwrap_or(i64::MAX) >= limit;
    let next = if full {
        items.last().map(&cursor)
    } else {
        None
    };
    Json(json!({"data": items, "next_cursor": next}))
}

// ---- health ----

async fn healthz(State(state): State<AppState>) -> Response {
    match state.db.account_count().await {
        Ok(_) => Json(json!({"status": "ok", "database": state.db.backend()})).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `GET /metrics`: Prometheus text format, no key (it names no account's objects; see
/// [`crate::metrics`]).
async fn metrics(State(state): State<AppState>) -> Response {
    match state.db.gauges().await {
        Ok(gauges) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            state.metrics.render(&gauges),
        )
            .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

// ---- endpoints ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewEndpoint {
    url: String,
    event_types: Option<Vec<String>>,
    description: Option<String>,
    timeout_ms: Option<u64>,
    api_version: Option<String>,
    rate_limit_per_second: Option<i64>,
    #[serde(default)]
    skip_challenge: bool,
}

/// `PATCH /v1/endpoints/{id}`: a field left out stays as it is. `null` clears the two nullable
/// settings and is refused for the others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointPatch {
    #[serde(default, deserialize_with = "present")]
    url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    event_types: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    description: Option<String>,
    #[serde(default, deserialize_with = "present")]
    timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "nullable")]
    api_version: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    rate_limit_per_second: Option<Option<i64>>,
    #[serde(default)]
    skip_challenge: bool,
}

/// A field that may be left out but, when given, is not `null`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A field that may be left out (`None`), cleared (`Some(None)`) or set.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Serialize)]
struct EndpointView {
    id: String,
    url: String,
    description: String,
    event_types: Vec<String>,
    timeout_ms: i64,
    status: String,
    api_version: Option<String>,
    rate_limit_per_second: Option<i64>,
    circuit_state: String,
    created_at: String,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

impl EndpointView {
    fn of(endpoint: Endpoint, secret: Option<String>) -> EndpointView {
        EndpointView {
            event_types: endpoint.types(),
            id: endpoint.id,
            url: endpoint.url,
            description: endpoint.description,
            timeout_ms: endpoint.timeout_ms,
            status: endpoint.status,
            api_version: endpoint.api_version,
            rate_limit_per_second: endpoint.rate_limit_per_second,
            circuit_state: endpoint.circuit_state,
            created_at: rfc3339(endpoint.created_at),
            updated_at: rfc3339(endpoint.updated_at),
            secret,
        }
    }
}

async fn create_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    body: Bytes,
) -> Result<Response, ApiError> {
    let new: NewEndpoint = parse(&body)?;
    let url = check_url(&new.url, &state.settings)?;
    let event_types = new.event_types.unwrap_or_else(|| vec!["*".to_owned()]);
    check_event_types(&event_types)?;
    let description = new.description.unwrap_or_default();
    check_description(&description)?;
    let timeout = match new.timeout_ms {
        None => state.settings.default_timeout,
        Some(ms) => check_timeout(ms)?,
    };
    if let Some(version) = &new.api_version {
        check_name("api_version", version, 64)?;
    }
    if let Some(limit) = new.rate_limit_per_second {
        check_rate_limit(limit)?;
    }
    // Last, once everything else is known to be acceptable: the only check that connects.
    if !new.skip_challenge {
        challenge(&state.settings, &url, timeout).await?;
    }
    let (endpoint, secret) = state
        .db
        .create_endpoint_with(
            &account,
            &StoredEndpoint {
                url: url.as_str(),
                event_types: &event_types,
                description: &description,
                timeout_ms: ms(timeout),
                api_version: new.api_version.as_deref(),
                rate_limit_per_second: new.rate_limit_per_second,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(EndpointView::of(endpoint, Some(secret))),
    )
        .into_response())
}

/// Runs the endpoint challenge ([`dispatch::challenge`]) against `url`; a failure is 422
/// `challenge_failed` saying what came back.
async fn challenge(
    settings: &ApiSettings,
    url: &reqwest::Url,
    timeout: Duration,
) -> Result<(), ApiError> {
    dispatch::challenge(&settings.client, url.as_str(), timeout)
        .await
        .map_err(|why| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "challenge_failed",
                format!(
                    "the endpoint challenge of {url} failed: {why}. The endpoint must answer \
                     `GET <url>?challenge=<token>` with a 2xx and the token as the whole body, \
                     as kxp receivers (kxp-axum, kxp-actix) do; send \"skip_challenge\": true \
                     to register it without the check"
                ),
            )
        })
}

fn check_description(description: &str) -> Result<(), ApiError> {
    if description.len() > 512 {
        return Err(ApiError::invalid("description must be at most 512 bytes"));
    }
    Ok(())
}

fn check_timeout(ms: u64) -> Result<Duration, ApiError> {
    let timeout = Duration::from_millis(ms);
    if (MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
        Ok(timeout)
    } else {
        Err(ApiError::invalid(format!(
            "timeout_ms must be between {} and {}",
            MIN_TIMEOUT.as_millis(),
            MAX_TIMEOUT.as_millis()
        )))
    }
}

fn check_rate_limit(limit: i64) -> Result<(), ApiError> {
    if (1..=MAX_RATE_LIMIT).contains(&limit) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "rate_limit_per_second must be between 1 and {MAX_RATE_LIMIT} (null for no limit)"
        )))
    }
}

/// Endpoint URLs: `https://` with a host, no credentials (`http://` only in development
/// mode); an IP-literal host must pass the address guard, and so must loopback names
/// (`localhost`, `*.localhost`). Other host names are checked when resolved, at every attempt:
/// what a name resolves to today says nothing about tomorrow.
fn check_url(text: &str, settings: &ApiSettings) -> Result<reqwest::Url, ApiError> {
    let url = reqwest::Url::parse(text).map_err(|e| ApiError::invalid(format!("url: {e}")))?;
    match url.scheme() {
        "https" => {}
        "http" if settings.dev => {}
        "http" => {
            return Err(ApiError::invalid(
                "url must be https:// (http:// is accepted only with `kxp serve --dev`)",
            ));
        }
        other => {
            return Err(ApiError::invalid(format!(
                "url scheme `{other}` is not http(s)"
            )));
        }
    }
    let Some(host) = url.host_str() else {
        return Err(ApiError::invalid("url has no host"));
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ApiError::invalid(
            "url must not carry credentials; authenticate with the signature",
        ));
    }
    let blocked = |blocked: Blocked| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "blocked_address",
            format!(
                "url host {blocked}; deliveries never go there (an operator can allow a range \
                 with `kxp serve --allow-address CIDR`; `--dev` allows loopback)"
            ),
        )
    };
    settings.guard.check_url(&url).map_err(blocked)?;
    // Loopback names (RFC 6761) resolve to this machine wherever they are used: refuse them
    // now unless the guard lets loopback through, rather than fail every attempt later.
    let name = host.strip_suffix('.').unwrap_or(host);
    if name == "localhost" || name.ends_with(".localhost") {
        let v4 = settings.guard.check(IpAddr::from([127, 0, 0, 1]));
        let v6 = settings.guard.check(IpAddr::from(Ipv6Addr::LOCALHOST));
        if let (Err(refused), Err(_)) = (v4, v6) {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "blocked_address",
                format!(
                    "url host `{host}` is this machine ({}), accepted only with `kxp serve --dev` \
                     or an `--allow-address` covering it",
                    refused.range()
                ),
            ));
        }
    }
    Ok(url)
}

fn check_event_types(types: &[String]) -> Result<(), ApiError> {
    if types.is_empty() {
        return Err(ApiError::invalid(
            "event_types must not be empty (use [\"*\"] for every type)",
        ));
    }
    for t in types {
        let body = t.strip_suffix('*').unwrap_or(t);
        let ok = t.len() <= 128
            && !t.is_empty()
            && body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok {
            return Err(ApiError::invalid(format!(
                "event type pattern `{t}` is not letters, digits, . _ - with an optional trailing *"
            )));
        }
    }
    Ok(())
}

async fn list_endpoints(
    State(state): State<AppState>,
    Authed(account): Authed,
    Query(page): Query<Page>,
) -> Result<Json<Value>, ApiError> {
    let limit = page.limit()?;
    let endpoints = state
        .db
        .endpoints(&account.id, page.cursor.as_deref(), limit)
        .await?;
    let views: Vec<EndpointView> = endpoints
        .into_iter()
        .map(|e| EndpointView::of(e, None))
        .collect();
    Ok(list(views, limit, |e| e.id.clone()))
}

async fn get_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    Ok(Json(EndpointView::of(
        state.db.endpoint(&account.id, &id).await?,
        None,
    )))
}

async fn endpoint_health(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<crate::health::EndpointHealth>, ApiError> {
    Ok(Json(state.db.endpoint_health(&account.id, &id).await?))
}

async fn patch_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<EndpointView>, ApiError> {
    let patch: EndpointPatch = parse(&body)?;
    let url = patch
        .url
        .as_deref()
        .map(|url| check_url(url, &state.settings))
        .transpose()?;
    if let Some(types) = &patch.event_types {
        check_event_types(types)?;
    }
    if let Some(description) = &patch.description {
        check_description(description)?;
    }
    let timeout = patch.timeout_ms.map(check_timeout).transpose()?;
    if let Some(Some(version)) = &patch.api_version {
        check_name("api_version", version, 64)?;
    }
    if let Some(Some(limit)) = patch.rate_limit_per_second {
        check_rate_limit(limit)?;
    }
    let current = state.db.endpoint(&account.id, &id).await?;
    if let Some(url) = &url
        && url.as_str() != current.url
        && !patch.skip_challenge
    {
        let timeout = timeout.unwrap_or_else(|| {
            Duration::from_millis(u64::try_from(current.timeout_ms).unwrap_or(5000))
        });
        challenge(&state.settings, url, timeout).await?;
    }
    let changes = EndpointChanges {
        url: url.map(String::from),
        event_types: patch.event_types,
        description: patch.description,
        timeout_ms: timeout.map(ms),
        api_version: patch.api_version,
        rate_limit_per_second: patch.rate_limit_per_second,
    };
    let endpoint = state.db.update_endpoint(&account.id, &id, &changes).await?;
    Ok(Json(EndpointView::of(endpoint, None)))
}

async fn delete_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let ended = state.db.delete_endpoint(&account.id, &id).await?;
    tracing::info!(
        target: "kxp_sender", endpoint_id = %id, dead_deliveries = ended,
        "endpoint deleted; its pending deliveries are dead with endpoint_deleted"
    );
    Ok(Json(
        json!({"id": id, "status": "deleted", "dead_deliveries": ended}),
    ))
}

async fn pause_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let (endpoint, held) = state.db.pause_endpoint(&account.id, &id).await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, held, "endpoint paused");
    Ok(Json(EndpointView::of(endpoint, None)))
}

async fn resume_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let (endpoint, due) = state
        .db
        .resume_endpoint(&account.id, &id, &state.settings.protection)
        .await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, due, "endpoint resumed");
    if due > 0 {
        state.wake.notify_waiters();
    }
    Ok(Json(EndpointView::of(endpoint, None)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Rotation {
    overlap: Option<Value>,
}

async fn rotate_secret(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: Rotation = if body.is_empty() {
        Rotation::default()
    } else {
        parse(&body)?
    };
    let overlap = match &request.overlap {
        None => DEFAULT_OVERLAP,
        Some(Value::String(text)) => parse_overlap(text)?,
        Some(_) => {
            return Err(ApiError::invalid(
                "overlap must be a duration string such as \"30m\", \"24h\" or \"0s\"",
            ));
        }
    };
    let rotated = state
        .db
        .rotate_secret(&account.id, &id, ms(overlap))
        .await?;
    tracing::info!(
        target: "kxp_sender", endpoint_id = %id, overlap_ms = ms(overlap),
        "endpoint secret rotated"
    );
    Ok(Json(json!({
        "secret": rotated.secret,
        "previous_expires_at": rfc3339(rotated.previous_expires_at),
    })))
}

fn parse_overlap(text: &str) -> Result<Duration, ApiError> {
    let overlap = parse_duration(text).map_err(|_| {
        ApiError::invalid(format!(
            "overlap `{text}` is not a duration such as 30m, 24h or 0s"
        ))
    })?;
    if overlap > MAX_OVERLAP {
        return Err(ApiError::invalid(
            "overlap must be at most 7d: a secret kept valid longer is not rotated",
        ));
    }
    Ok(overlap)
}

// ---- events ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewEvent<'a> {
    #[serde(rename = "type")]
    event_type: String,
    #[serde(borrow)]
    data: &'a RawValue,
    api_version: Option<String>,
}

async fn create_event(
    State(state): State<AppState>,
    Authed(account): Authed,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let new: NewEvent<'_> = parse(&body)?;
    check_name("type", &new.event_type, 128)?;
    let api_version = new
        .api_version
        .unwrap_or_else(|| account.default_api_version.clone());
    check_name("api_version", &api_version, 64)?;
    if let Some(violation) =
        check_schema(&state, &account, &new.event_type, &api_version, new.data).await?
    {
        return Ok(violation);
    }
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => {
            let key = value.to_str().ok().filter(|k| {
                (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic())
            });
            Some(key.ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_idempotency_key",
                    "Idempotency-Key must be 1 to 255 printable ASCII characters",
                )
            })?)
        }
    };
    let hash = sha256_hex(&body);
    let ingested = state
        .db
        .ingest(
            &account,
            &new.event_type,
            &api_version,
            new.data,
            key.map(|k| (k, hash.as_str())),
        )
        .await?;
    let event = match ingested {
        Ingested::Created(event, queued) => {
            state.metrics.event_ingested();
            if queued > 0 {
                state.wake.notify_waiters();
            }
            event
        }
        Ingested::Replayed(event) => event,
        Ingested::KeyReused => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request",
            ));
        }
    };
    Ok((StatusCode::ACCEPTED, raw_json(event.payload)).into_response())
}

/// Checks `data` against the schema registered for its type and version, if any: the 400
/// `schema_violation` response when it does not fit.
async fn check_schema(
    state: &AppState,
    account: &Account,
    event_type: &str,
    api_version: &str,
    data: &RawValue,
) -> Result<Option<Response>, ApiError> {
    let violation = state
        .schemas
        .check(&state.db, &account.id, event_type, api_version, data)
        .await?;
    Ok(violation.map(|v| {
        let message = format!(
            "data{} does not match the schema of {event_type} {api_version}: {}",
            v.path, v.message
        );
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "schema_violation", "message": message, "path": v.path})),
        )
            .into_response()
    }))
}

fn check_name(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{field} must be 1 to {max} letters, digits, . _ -"
        )))
    }
}

/// The stored envelope, sent as it is: the API shows exactly what receivers get.
fn raw_json(payload: String) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        payload,
    )
        .into_response()
}

async fn get_event(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(raw_json(state.db.event(&account.id, &id).await?.payload))
}

// ---- schemas ----

/// The largest schema document accepted.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

fn schema_json(schema: Schema) -> Value {
    let document: Value = serde_json::from_str(&schema.schema).unwrap_or(Value::Null);
    json!({
        "id": schema.id,
        "type": schema.event_type,
        "api_version": schema.api_version,
        "schema": document,
        "created_at": rfc3339(schema.created_at),
        "updated_at": rfc3339(schema.updated_at),
    })
}

fn schema_key(event_type: &str, api_version: &str) -> Result<(), ApiError> {
    check_name("type", event_type, 128)?;
    check_name("api_version", api_version, 64)
}

async fn put_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    schema_key(&event_type, &api_version)?;
    if body.len() > MAX_SCHEMA_BYTES {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_schema",
            format!("a schema is at most {MAX_SCHEMA_BYTES} bytes"),
        ));
    }
    let document: Value = parse(&body)?;
    if !document.is_object() && !document.is_boolean() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_schema",
            "a JSON Schema is an object or a boolean",
        ));
    }
    crate::schemas::compile(&document)
        .map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_schema", e))?;
    let (stored, created) = state
        .db
        .put_schema(
            &account.id,
            &event_type,
            &api_version,
            &document.to_string(),
        )
        .await?;
    state.schemas.forget(&account.id, &event_type, &api_version);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(schema_json(stored))).into_response())
}

async fn list_schemas(
    State(state): State<AppState>,
    Authed(account): Authed,
) -> Result<Json<Value>, ApiError> {
    let schemas: Vec<Value> = state
        .db
        .schemas(&account.id)
        .await?
        .into_iter()
        .map(schema_json)
        .collect();
    Ok(Json(json!({"data": schemas, "next_cursor": null})))
}

async fn get_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(schema_json(
        state
            .db
            .schema(&account.id, &event_type, &api_version)
            .await?,
    )))
}

async fn delete_schema(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path((event_type, api_version)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    state
        .db
        .delete_schema(&account.id, &event_type, &api_version)
        .await?;
    state.schemas.forget(&account.id, &event_type, &api_version);
    Ok(Json(
        json!({"deleted": true, "type": event_type, "api_version": api_version}),
    ))
}

// ---- deliveries ----

#[derive(Serialize)]
struct DeliveryView {
    id: String,
    event_id: String,
    endpoint_id: String,
    status: String,
    attempts: i64,
    next_attempt_at: Option<String>,
    last_status: Option<i64>,
    last_error: Option<String>,
    replayed_by: Option<String>,
    created_at: String,
    updated_at: String,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> DeliveryView {
        DeliveryView {
            // Held for a paused endpoint: no time until it is resumed.
            next_attempt_at: (d.status == "pending" && d.next_attempt_at != HELD)
                .then(|| rfc3339(d.next_attempt_at)),
            id: d.id,
            event_id: d.event_id,
            endpoint_id: d.endpoint_id,
            status: d.status,
            attempts: d.attempts,
            last_status: d.last_status,
            last_error: d.last_error,
            replayed_by: d.replayed_by,
            created_at: rfc3339(d.created_at),
            updated_at: rfc3339(d.updated_at),
        }
    }
}

#[derive(Serialize)]
struct AttemptView {
    attempt: i64,
    started_at: String,
    duration_ms: i64,
    status_code: Option<i64>,
    error: Option<String>,
    response_snippet: Option<String>,
}

impl From<Attempt> for AttemptView {
    fn from(a: Attempt) -> AttemptView {
        AttemptView {
            attempt: a.attempt,
            started_at: rfc3339(a.started_at),
            duration_ms: a.duration_ms,
            status_code: a.status_code,
            error: a.error,
            response_snippet: a.response_snippet,
        }
    }
}

#[derive(Deserialize)]
struct DeliveryQuery {
    status: Option<String>,
    endpoint_id: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

const STATUSES: [&str; 4] = ["pending", "delivering", "delivered", "dead"];

fn filter(
    status: Option<String>,
    endpoint_id: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<DeliveryFilter, ApiError> {
    if let Some(status) = &status
        && !STATUSES.contains(&status.as_str())
    {
        return Err(ApiError::invalid(format!(
            "status must be one of {}",
            STATUSES.join(", ")
        )));
    }
    Ok(DeliveryFilter {
        status,
        endpoint_id,
        since: since.map(parse_time).transpose()?,
        until: until.map(parse_time).transpose()?,
    })
}

fn parse_time(text: &str) -> Result<i64, ApiError> {
    parse_rfc3339(text).ok_or_else(|| {
        ApiError::invalid(format!(
            "`{text}` is not an RFC 3339 time such as 2026-11-30T01:02:03Z"
        ))
    })
}

async fn list_deliveries(
    State(state): State<AppState>,
    Authed(account): Authed,
    Query(q): Query<DeliveryQuery>,
) -> Result<Json<Value>, ApiError> {
    let page = Page {
        cursor: q.cursor,
        limit: q.limit,
    };
    let limit = page.limit()?;
    let filter = filter(
        q.status,
        q.endpoint_id,
        q.since.as_deref(),
        q.until.as_deref(),
    )?;
    let items = state
        .db
        .deliveries(&account.id, &filter, page.cursor.as_deref(), limit)
        .await?;
    let views: Vec<DeliveryView> = items.into_iter().map(DeliveryView::from).collect();
    Ok(list(views, limit, |d| d.id.clone()))
}

async fn event_deliveries(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let items = state.db.event_deliveries(&account.id, &id).await?;
    let views: Vec<DeliveryView> = items.into_iter().map(DeliveryView::from).collect();
    Ok(Json(json!({"data": views, "next_cursor": null})))
}

async fn delivery_attempts(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let items = state.db.attempts(&account.id, &id).await?;
    let views: Vec<AttemptView> = items.into_iter().map(AttemptView::from).collect();
    Ok(Json(json!({"data": views, "next_cursor": null})))
}

async fn replay_delivery(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let delivery = state.db.replay(&account.id, &id).await?;
    state.wake.notify_waiters();
    Ok((StatusCode::ACCEPTED, Json(DeliveryView::from(delivery))).into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BulkReplay {
    status: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

async fn replay_endpoint(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: BulkReplay = if body.is_empty() {
        BulkReplay::default()
    } else {
        parse(&body)?
    };
    if matches!(request.status.as_deref(), Some("pending" | "delivering")) {
        return Err(ApiError::invalid(
            "only dead or delivered deliveries can be replayed",
        ));
    }
    let filter = filter(
        request.status,
        None,
        request.since.as_deref(),
        request.until.as_deref(),
    )?;
    let queued = state.db.replay_endpoint(&account.id, &id, &filter).await?;
    if queued > 0 {
        state.wake.notify_waiters();
    }
    Ok((StatusCode::ACCEPTED, Json(json!({"queued": queued}))).into_response())
}
