//! The catch-up feed (`GET /v1/endpoints/{id}/feed`), which the merchant's receiver reads with
//! the endpoint's own credential, and its token (`POST /v1/endpoints/{id}/feed-token`), which
//! the platform makes with its API key for endpoints whose receiver holds no HMAC secret.
//!
//! The feed is a second path to the events the deliveries carry: it answers whatever the
//! deliveries' state (pending, delivered, dead, held by a pause), so a receiver can find what a
//! dead delivery or its own lost backup took from it without asking the platform to replay.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use kxp_api::{
    CommitCursor, DEFAULT_FEED_LIMIT, ErrorCode, FeedItem, FeedPage, FeedQuery, FeedToken,
    MAX_FEED_LIMIT, MAX_FEED_WAIT, PullCursor, Timestamp,
};
use kxp_verify::{
    DEFAULT_TOLERANCE, FEED_SIGNATURE_HEADER, FeedItemFields, FeedPageFields, Secret, Verifier,
    feed_request_message,
};

use super::errors::ApiQuery;
use super::{ApiBody, ApiError, AppState, Authed, parse};
use crate::engine::dispatch::signature_headers;
use crate::engine::waiters::{self, Full};
use crate::engine::worker::{body, open_secrets};
use crate::model::{EndpointId, Gone, Key, Material, READ_MARK_EVERY, random_hex_32, sha256_hex};
use crate::store::{Committed, FeedRow, FeedSource};

/// Feed requests an endpoint may make per second, per process: a receiver catching up pages
/// through at 100–500 events a request, far above what it needs, and no one can make the
/// feed read the database faster than this with a stolen credential.
pub(crate) const FEED_RATE_LIMIT: u32 = 20;

/// What feed tokens start with, so people and secret scanners can tell one.
const FEED_TOKEN_PREFIX: &str = "kxpft_";

/// The endpoint's events after `after` (absent: after a pull endpoint's committed cursor, else
/// from the start), each with its number, its body byte for byte as a
/// delivery sends it, the signature headers a delivery made now would carry and a MAC over all
/// of it with the key of the credential that read the page (`FeedItem::mac`). Authenticated
/// with the endpoint's credential: `X-Kxp-Feed-Signature: t=…,v1=…` over `GET <path?query>`
/// with the feed key of a live HMAC secret (within 5 minutes), or `Authorization: Bearer
/// <feed token>`; never with an API key. Answers 410 `sequence_purged` when retention purged
/// numbers after `after`, with `earliest`, the next one it holds. With `wait`, a page that
/// would be empty waits for its first item up to that many seconds (at most 4 such long polls
/// per endpoint, 429 `too_many_waiters` beyond), holding no database connection; a server
/// shutting down answers them at once.
#[utoipa::path(get, path = "/v1/endpoints/{id}/feed", tag = "endpoints", security(()),
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint"), FeedQuery),
    responses(
        (status = 200, description = "The next items, by number", body = FeedPage),
        (status = 401, description = "Not signed with the endpoint's credential", body = kxp_api::ErrorBody),
        (status = 410, description = "Purged by retention; `earliest` says where the feed resumes", body = kxp_api::ErrorBody),
        (status = 429, description = "More than 20 requests in the last second, or too many long polls waiting", body = kxp_api::ErrorBody)))]
pub(super) async fn feed(
    State(state): State<AppState>,
    Path(id): Path<EndpointId>,
    ApiQuery(query): ApiQuery<FeedQuery>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Json<FeedPage>, ApiError> {
    let wait = match query.wait.unwrap_or(0) {
        wait @ 0..=MAX_FEED_WAIT => Duration::from_secs(u64::from(wait)),
        _ => {
            return Err(ApiError::new(
                ErrorCode::InvalidQuery,
                format!("wait: 0 to {MAX_FEED_WAIT} seconds"),
            ));
        }
    };
    let limit = match query.limit.unwrap_or(DEFAULT_FEED_LIMIT) {
        limit @ 1..=MAX_FEED_LIMIT => i64::from(limit),
        _ => {
            return Err(ApiError::new(
                ErrorCode::InvalidQuery,
                format!("limit: 1 to {MAX_FEED_LIMIT}"),
            ));
        }
    };
    let reader =
        Reader::authenticate(&state, &id, &method, &uri, &headers, b"", Budget::Feed).await?;
    let (source, item_key) = (&reader.source, &reader.item_key);
    if source.is_pull() {
        mark_read(&state, source).await;
    }
    // A pull endpoint's reader resumes after its committed cursor; a push endpoint's feed
    // starts at 0, as kxp-catchup expects.
    let after = match query.after {
        Some(after) => i64::try_from(after).map_err(|_| too_far())?,
        None if source.is_pull() => source.pull_cursor,
        None => 0,
    };
    let rows = state.db.feed_rows(source, after, limit).await?;
    let mut rows = contiguous(source, after, rows, item_key)?;
    let mut latest = source.latest;
    if rows.is_empty() && !wait.is_zero() && !state.shared.feed_waiters.stopped() {
        let waiting = state.shared.feed_waiters.join(&source.id).map_err(|full| {
            let whose = match full {
                Full::Endpoint => format!("this endpoint's feed ({})", waiters::PER_ENDPOINT),
                Full::Process => {
                    format!("this server process ({})", state.shared.feed_waiters.cap())
                }
            };
            ApiError::new(
                ErrorCode::TooManyWaiters,
                format!("as many long polls wait on {whose} as may; retry, or read without wait"),
            )
            .retry_after(1)
        })?;
        let until = crate::model::tokio_instant() + wait;
        rows = waiting
            .until(
                until,
                || async {
                    let rows = state.db.feed_rows(source, after, limit).await?;
                    contiguous(source, after, rows, item_key)
                },
                |rows| !rows.is_empty(),
            )
            .await?;
        latest = state.db.feed_latest(source).await?;
    }
    let items = rows
        .into_iter()
        .map(|row| item(source, &reader.secrets, item_key, row))
        .collect::<Result<Vec<_>, _>>()?;
    let latest = u64::try_from(latest).unwrap_or(0);
    let after = u64::try_from(after).unwrap_or(0);
    Ok(Json(FeedPage {
        endpoint_id: source.id.clone(),
        latest,
        items,
        mac: Some(FeedPageFields::page(source.id.as_str(), after, latest).mac_hex(item_key)),
    }))
}

/// How far a pull endpoint's reader has committed, and the newest number. Authenticated as the
/// feed is, with the endpoint's credential.
#[utoipa::path(get, path = "/v1/endpoints/{id}/cursor", tag = "endpoints", security(()),
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses(
        (status = 200, description = "The cursor", body = PullCursor),
        (status = 401, description = "Not signed with the endpoint's credential", body = kxp_api::ErrorBody),
        (status = 422, description = "Not a pull endpoint", body = kxp_api::ErrorBody)))]
pub(super) async fn cursor(
    State(state): State<AppState>,
    Path(id): Path<EndpointId>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Json<PullCursor>, ApiError> {
    let reader =
        Reader::authenticate(&state, &id, &method, &uri, &headers, b"", Budget::Feed).await?;
    let source = reader.pulled()?;
    mark_read(&state, source).await;
    Ok(Json(PullCursor {
        sequence: u64::try_from(source.pull_cursor).unwrap_or(0),
        latest: u64::try_from(source.latest).unwrap_or(0),
        committed_at: source.pull_cursor_at.map(Timestamp::from_unix_ms),
    }))
}

/// Commits a pull endpoint's cursor: every item up to and including `sequence` is processed,
/// and a read without `after` starts after it. Authenticated as the feed is, the signature
/// covering the body too (`kxp_verify::feed_request_message`). The same number again is 204;
/// a lower one 409 `cursor_behind`; one past `latest` 422.
#[utoipa::path(put, path = "/v1/endpoints/{id}/cursor", tag = "endpoints", security(()),
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    request_body = CommitCursor,
    responses(
        (status = 204, description = "Committed (or committed already)"),
        (status = 401, description = "Not signed with the endpoint's credential", body = kxp_api::ErrorBody),
        (status = 409, description = "`cursor_behind`: the cursor is past this number already", body = kxp_api::ErrorBody),
        (status = 422, description = "Past `latest`, or not a pull endpoint", body = kxp_api::ErrorBody)))]
pub(super) async fn commit_cursor(
    State(state): State<AppState>,
    Path(id): Path<EndpointId>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> Result<StatusCode, ApiError> {
    let reader =
        Reader::authenticate(&state, &id, &method, &uri, &headers, &body, Budget::Feed).await?;
    let source = reader.pulled()?;
    let commit: CommitCursor = parse(&body)?;
    let sequence = i64::try_from(commit.sequence).map_err(|_| past(source))?;
    if sequence > source.latest {
        return Err(past(source));
    }
    match state.db.commit_cursor(source, sequence).await? {
        Committed::Moved | Committed::Same => Ok(StatusCode::NO_CONTENT),
        Committed::Behind(cursor) => Err(ApiError::new(
            ErrorCode::CursorBehind,
            format!("the cursor is at {cursor} already: commits only move forward"),
        )),
    }
}

/// Writes down that a pull endpoint's reader came (health's "last read", and what keeps a
/// temporary endpoint from being removed), often enough for an abandoned temporary endpoint to
/// be told from a read one. A failure is logged: the read is answered all the same.
async fn mark_read(state: &AppState, source: &FeedSource) {
    let every = READ_MARK_EVERY.min(state.shared.config.temporary_idle / 4);
    if let Err(e) = state.db.mark_read(source, every).await {
        tracing::warn!(target: "kxp_sender", endpoint_id = %source.id, error = %e, "a feed read could not be written down");
    }
}

fn past(source: &FeedSource) -> ApiError {
    ApiError::invalid(format!(
        "sequence: past the newest number the endpoint has given ({})",
        source.latest
    ))
}

/// Thin events' fetches an endpoint may make per second, per process: one per thin delivery,
/// each a read of one row, so far more than the feed's pages.
pub(crate) const FETCH_RATE_LIMIT: u32 = 1000;

/// Which of an endpoint's request budgets a request draws on.
#[derive(Clone, Copy)]
pub(super) enum Budget {
    /// The feed and the cursor: [`FEED_RATE_LIMIT`] a second.
    Feed,
    /// Thin events' fetches: [`FETCH_RATE_LIMIT`] a second.
    Fetch,
}

impl Budget {
    fn limit(self) -> u32 {
        match self {
            Budget::Feed => FEED_RATE_LIMIT,
            Budget::Fetch => FETCH_RATE_LIMIT,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Budget::Feed => "feed",
            Budget::Fetch => "fetch",
        }
    }
}

/// A feed request authenticated with the endpoint's credential, within its rate limit.
pub(super) struct Reader {
    pub(super) source: FeedSource,
    pub(super) secrets: Vec<Material>,
    item_key: Secret,
}

impl Reader {
    /// The endpoint `id`'s reader, when the request carries its credential ([`authenticated`])
    /// and the endpoint has made fewer requests of the `budget` this second than it allows.
    pub(super) async fn authenticate(
        state: &AppState,
        id: &EndpointId,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        budget: Budget,
    ) -> Result<Reader, ApiError> {
        let source = state.db.feed_source(id).await?;
        let secrets = source
            .as_ref()
            .map(|s| open_secrets(&state.shared, &s.id, &s.secrets))
            .unwrap_or_default();
        let Some((source, item_key)) = source.and_then(|s| {
            let key = authenticated(&s, &secrets, method, uri, headers, body)?;
            Some((s, key))
        }) else {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "the request must be signed with a live secret of this endpoint (X-Kxp-Feed-Signature) \
                 or carry its feed token",
            ));
        };
        let granted = state
            .shared
            .api_requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .try_take(
                &format!("{}:{}", budget.name(), source.id),
                Some(budget.limit()),
                crate::model::tokio_instant(),
            );
        if !granted {
            return Err(ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "this endpoint took more than {} {} requests in the last second",
                    budget.limit(),
                    budget.name()
                ),
            )
            .retry_after(1));
        }
        Ok(Reader {
            source,
            secrets,
            item_key,
        })
    }

    /// Its endpoint, when it is a pull endpoint (a cursor is a pull endpoint's alone).
    fn pulled(&self) -> Result<&FeedSource, ApiError> {
        if self.source.is_pull() {
            Ok(&self.source)
        } else {
            Err(ApiError::invalid(format!(
                "{} is a push endpoint: only a pull endpoint has a cursor",
                self.source.id
            )))
        }
    }
}

/// Gives the endpoint a new feed token (shown once; the server keeps its hash), in place of any
/// before: for receivers that hold no HMAC secret to sign feed requests with (Ed25519
/// endpoints), or that should read the feed with a credential of its own.
#[utoipa::path(post, path = "/v1/endpoints/{id}/feed-token", tag = "endpoints",
    params(("id" = kxp_api::EndpointId, Path, description = "The endpoint")),
    responses((status = 201, description = "The token, shown once", body = FeedToken)))]
pub(super) async fn create_feed_token(
    State(state): State<AppState>,
    Authed(account): Authed,
    Path(id): Path<EndpointId>,
) -> Result<(StatusCode, Json<FeedToken>), ApiError> {
    let token = format!("{FEED_TOKEN_PREFIX}{}", random_hex_32());
    state
        .db
        .set_feed_token(&account.id, &id, &sha256_hex(token.as_bytes()))
        .await?;
    tracing::info!(target: "kxp_sender", endpoint_id = %id, "feed token made");
    Ok((StatusCode::CREATED, Json(FeedToken { token })))
}

/// The key the page's items are MACed with, when the request carries the endpoint's feed token
/// or is signed with the feed key of one of its live HMAC secrets over its method, target and
/// body, within the tolerance; `None` when it is not authenticated.
///
/// The key is the credential's own: the feed key that verified this request (during a
/// rotation, the one of whichever secret the receiver signed with, which is the one it checks
/// the MACs with), or for a token the feed key of `Secret::new(<the stored hash>)`, which is
/// `Secret::from_feed_token(token)` on the receiver's side.
fn authenticated(
    source: &FeedSource,
    secrets: &[Material],
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Secret> {
    if let (Some(token), Some(hash)) = (bearer(headers), &source.feed_token_hash) {
        // Hashes of a secret compared: nothing about the token leaks from how long it takes.
        return (sha256_hex(token.as_bytes()) == *hash)
            .then(|| Secret::new(hash).ok())
            .flatten()
            .map(|secret| secret.feed_key());
    }
    let header = headers.get(FEED_SIGNATURE_HEADER)?;
    let keys: Vec<Secret> = secrets
        .iter()
        .filter_map(|m| match &m.key {
            Key::Hmac(secret) => Some(secret.feed_key()),
            Key::Ed25519(_) => None,
        })
        .collect();
    let verifier = Verifier::with_secrets(keys.iter().cloned()).ok()?;
    let target = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let message = feed_request_message(method.as_str(), target, body);
    let verified = verifier
        .with_tolerance(DEFAULT_TOLERANCE)
        .verify_now(header.as_bytes(), &message)
        .ok()?;
    // The verifier names the key that matched by its fingerprint; an endpoint's live secrets
    // are distinct, and so are their feed keys' fingerprints.
    keys.into_iter()
        .find(|key| key.fingerprint() == verified.key_fingerprint())
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .filter(|token| token.starts_with(FEED_TOKEN_PREFIX))
}

/// The rows up to the first hole: numbers after `after` that are gone were purged by
/// retention (the sequencer gives every number to a delivery). A hole right after `after` is
/// 410 `sequence_purged`, naming the next number held, with its MAC under `item_key`.
fn contiguous(
    source: &FeedSource,
    after: i64,
    rows: Vec<FeedRow>,
    item_key: &Secret,
) -> Result<Vec<FeedRow>, ApiError> {
    let first = rows.first().map(|row| row.sequence);
    let next = after.saturating_add(1);
    if next <= source.latest && first != Some(next) {
        let earliest = first.unwrap_or(source.latest.saturating_add(1));
        let frame = FeedPageFields::purged(
            source.id.as_str(),
            u64::try_from(after).unwrap_or(0),
            u64::try_from(earliest).unwrap_or(0),
        );
        return Err(ApiError::new(
            ErrorCode::SequencePurged,
            format!(
                "numbers {next} to {} were purged by retention; the feed resumes at {earliest}",
                earliest.saturating_sub(1)
            ),
        )
        .earliest(frame.bound, frame.mac_hex(item_key)));
    }
    let held = rows
        .iter()
        .zip(next..)
        .take_while(|(row, expected)| row.sequence == *expected)
        .count();
    let mut rows = rows;
    rows.truncate(held);
    Ok(rows)
}

/// One row as a delivery would send it now: sealed to the endpoint's encryption key when it has
/// one, and signed with all its live material; with its MAC under `item_key`.
fn item(
    source: &FeedSource,
    secrets: &[Material],
    item_key: &Secret,
    row: FeedRow,
) -> Result<FeedItem, ApiError> {
    let unsendable = |why: String| {
        tracing::error!(
            target: "kxp_sender", endpoint_id = %source.id, error = %why,
            "a feed item could not be sealed or signed"
        );
        ApiError::new(
            ErrorCode::StoreUnavailable,
            format!("the endpoint's items cannot be signed or sealed now: {why}"),
        )
        .retry_after(Duration::from_secs(60).as_secs())
    };
    let (body, headers) = match Gone::parse(row.withheld.as_deref()) {
        // Its number stays, with the MAC alone vouching for the marker: there is no event to
        // sign.
        Some(gone) => (gone.marker(), BTreeMap::new()),
        None => {
            let body = body(
                source.encryption_jwk.as_deref(),
                source.is_thin(),
                &row.payload,
            )
            .map_err(|e| unsendable(e.to_string()))?
            .into_owned();
            let headers = signature_headers(row.event_id.as_str(), &body, secrets)
                .map_err(|e| unsendable(e.to_string()))?
                .into_iter()
                .map(|(name, value)| (name.to_owned(), value))
                .collect();
            (body, headers)
        }
    };
    let sequence = u64::try_from(row.sequence).unwrap_or(0);
    let mac = FeedItemFields {
        endpoint_id: source.id.as_str(),
        sequence,
        event_id: row.event_id.as_str(),
        ordering_key: row.ordering_key.as_deref(),
        body: body.as_bytes(),
    }
    .mac_hex(item_key);
    Ok(FeedItem {
        sequence,
        event_id: row.event_id,
        event_type: row.event_type,
        ordering_key: row.ordering_key,
        body,
        headers,
        mac: Some(mac),
    })
}

fn too_far() -> ApiError {
    ApiError::new(ErrorCode::InvalidQuery, "after: too large")
}
