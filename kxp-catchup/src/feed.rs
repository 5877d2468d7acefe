//! The sender's catch-up feed, read with the endpoint's credential over TLS (or to this
//! machine), each page's items checked against their MACs before any of their values is used.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use kxp_api::{CommitCursor, ErrorBody, FeedPage, FeedQuery, PullCursor};
use kxp_verify::{
    FEED_SIGNATURE_HEADER, FeedItemFields, FeedPageFields, Secret, Signer, feed_request_message,
};

/// What a receiver proves it is the endpoint's with.
#[derive(Clone)]
pub enum Credential {
    /// The endpoint's HMAC secret, as the receiver verifies deliveries with it: requests are
    /// signed with its [feed key](Secret::feed_key), which signs nothing else.
    Secret(Secret),
    /// A feed token (`kxpft_…`) the platform made for the endpoint: for receivers with no HMAC
    /// secret (Ed25519 endpoints).
    Token(String),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Secret(_) => f.write_str("Credential::Secret([redacted])"),
            Credential::Token(_) => f.write_str("Credential::Token([redacted])"),
        }
    }
}

/// Why a feed request brought no page. Never holds the credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// No answer (connection, timeout, TLS).
    #[error("transport: the feed did not answer: {0}")]
    Transport(String),
    /// The sender refused the credential (401): wrong secret or token, or no such endpoint.
    #[error("unauthorized: the sender refused this receiver's credential for the endpoint's feed")]
    Unauthorized,
    /// Too many feed requests (429); try after this long.
    #[error("rate_limited: the sender asks to wait {0:?}")]
    RateLimited(Duration),
    /// Another answer than the feed describes.
    #[error("unexpected: the feed answered {status}: {message}")]
    Unexpected {
        /// The HTTP status.
        status: u16,
        /// What the body said.
        message: String,
    },
    /// A page whose items are not all the sender's: an item without its MAC or with a wrong
    /// one, or a page of another endpoint than the one asked for. Something between the
    /// receiver and the sender altered it (or the sender is older than this crate: it needs a
    /// sender that MACs its items). The whole page is refused, before any item is used.
    #[error("forged: {0}; the page was refused whole")]
    Forged(String),
    /// A sender URL over plain `http://` to another host than this machine, or of another
    /// scheme: the feed, its items and a feed token would cross the network unencrypted. Says
    /// the scheme and host only, never the rest of the URL (which may hold credentials).
    #[error(
        "insecure_url: the sender URL must be https:// (http:// only to 127.0.0.0/8, ::1 or \
         localhost), not {scheme}:// to {host:?}"
    )]
    InsecureUrl {
        /// The URL's scheme.
        scheme: String,
        /// The URL's host, if any.
        host: String,
    },
    /// A sender URL that does not parse (the URL itself is not repeated: it may hold
    /// credentials).
    #[error("invalid_url: the sender URL does not parse: {0}")]
    InvalidUrl(String),
    /// The event's payload is gone on the sender (410 `erased` or `expired`): there is
    /// nothing to fetch, now or later.
    #[error("gone: the event's payload was {0} on the sender")]
    Gone(kxp_api::GoneReason),
}

impl FeedError {
    /// A stable name, for logs and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            FeedError::Transport(_) => "transport",
            FeedError::Unauthorized => "unauthorized",
            FeedError::RateLimited(_) => "rate_limited",
            FeedError::Unexpected { .. } => "unexpected",
            FeedError::Forged(_) => "forged",
            FeedError::InsecureUrl { .. } => "insecure_url",
            FeedError::InvalidUrl(_) => "invalid_url",
            FeedError::Gone(_) => "gone",
        }
    }
}

/// One answer of the feed.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The next items.
    Page(FeedPage),
    /// Retention purged the numbers asked for; the feed resumes at `earliest`.
    Purged {
        /// The first number after the purged ones that the feed holds.
        earliest: u64,
    },
}

/// A client of one sender's feed.
#[derive(Debug, Clone)]
pub struct FeedClient {
    base: String,
    credential: Credential,
    /// What the items are MACed with: the credential's feed key (`Debug` redacts it).
    item_key: Secret,
    http: reqwest::Client,
}

impl FeedClient {
    /// The feed of the sender at `base` (`https://webhooks.platform.example`), read with
    /// `credential`. Requests time out after 30 s.
    ///
    /// `base` must be `https://`, or `http://` to this machine (127.0.0.0/8, `[::1]`,
    /// `localhost`), else [`FeedError::InsecureUrl`], before any connection: an item's MAC
    /// keeps its number and ordering key from being altered, but over plain HTTP anyone on
    /// the way would read the events, and a feed token.
    pub fn new(base: &str, credential: Credential) -> Result<FeedClient, FeedError> {
        secure(base)?;
        let item_key = match &credential {
            Credential::Secret(secret) => secret.feed_key(),
            Credential::Token(token) => Secret::from_feed_token(token).feed_key(),
        };
        // No redirects: a redirect could take the signed request (replayable for its
        // tolerance) and the page to a plain-HTTP or other host the URL check never saw.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("kxp-catchup/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FeedError::Transport(e.to_string()))?;
        Ok(FeedClient {
            base: base.trim_end_matches('/').to_owned(),
            credential,
            item_key,
            http,
        })
    }

    /// The endpoint's items after `after`, at most `limit`; a page is answered only when it is
    /// `endpoint_id`'s and each of its items has the MAC the sender makes with this client's
    /// credential ([`FeedError::Forged`] otherwise).
    pub async fn page(
        &self,
        endpoint_id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Answer, FeedError> {
        self.page_waiting(endpoint_id, after, limit, 0).await
    }

    /// [`FeedClient::page`] as a long poll: with nothing after `after` yet, the sender waits up
    /// to `wait` seconds (at most [`kxp_api::MAX_FEED_WAIT`]) for the first item before it
    /// answers. The request's own timeout is that much longer.
    pub async fn page_waiting(
        &self,
        endpoint_id: &str,
        after: u64,
        limit: u32,
        wait: u32,
    ) -> Result<Answer, FeedError> {
        // The request target is built here, as signed: the query in this order, nothing that
        // needs escaping (an endpoint id is `ep_` and hex; a forged one is refused first).
        checked_id(endpoint_id)?;
        let query = FeedQuery::after(after, limit);
        let mut target = format!(
            "/v1/endpoints/{endpoint_id}/feed?after={}&limit={}",
            query.after.unwrap_or(0),
            query.limit.unwrap_or(limit)
        );
        let wait = wait.min(kxp_api::MAX_FEED_WAIT);
        if wait > 0 {
            target.push_str(&format!("&wait={wait}"));
        }
        let request = self
            .request(reqwest::Method::GET, &target, Vec::new())
            .timeout(REQUEST_TIMEOUT + Duration::from_secs(u64::from(wait)));
        let (status, retry_after, body) = send(request).await?;
        let unexpected = |message: String| FeedError::Unexpected { status, message };
        match status {
            200 => {
                let page: FeedPage =
                    serde_json::from_slice(&body).map_err(|e| unexpected(e.to_string()))?;
                authentic(&page, endpoint_id, after, &self.item_key)?;
                Ok(Answer::Page(page))
            }
            410 => match serde_json::from_slice::<ErrorBody>(&body) {
                Ok(ErrorBody {
                    earliest: Some(earliest),
                    mac,
                    ..
                }) => {
                    let frame = FeedPageFields::purged(endpoint_id, after, earliest);
                    if !mac.is_some_and(|mac| frame.verify_mac(&self.item_key, &mac)) {
                        return Err(FeedError::Forged(format!(
                            "a 410 saying the feed resumes at {earliest} has no mac that \
                             matches it"
                        )));
                    }
                    // A purge leaves a hole right after `after`: anything else is no answer
                    // a sender gives.
                    if earliest <= after.saturating_add(1) {
                        return Err(unexpected(format!(
                            "410 with earliest {earliest}, not past after={after} + 1"
                        )));
                    }
                    Ok(Answer::Purged { earliest })
                }
                _ => Err(unexpected("410 without `earliest`".to_owned())),
            },
            _ => Err(refused(status, retry_after, &body)),
        }
    }

    /// A pull endpoint's committed cursor: every item up to it was processed.
    pub async fn cursor(&self, endpoint_id: &str) -> Result<PullCursor, FeedError> {
        checked_id(endpoint_id)?;
        let target = format!("/v1/endpoints/{endpoint_id}/cursor");
        let (status, retry_after, body) =
            send(self.request(reqwest::Method::GET, &target, Vec::new())).await?;
        match status {
            200 => serde_json::from_slice(&body).map_err(|e| FeedError::Unexpected {
                status,
                message: e.to_string(),
            }),
            _ => Err(refused(status, retry_after, &body)),
        }
    }

    /// Commits a pull endpoint's cursor at `sequence`: every item up to it is processed, and
    /// the sender marks them delivered. Answers [`Committed::Behind`] when the cursor is past
    /// it already (another reader went further).
    pub async fn commit(&self, endpoint_id: &str, sequence: u64) -> Result<Committed, FeedError> {
        checked_id(endpoint_id)?;
        let target = format!("/v1/endpoints/{endpoint_id}/cursor");
        let body = serde_json::to_vec(&CommitCursor { sequence })
            .map_err(|e| FeedError::Transport(e.to_string()))?;
        let (status, retry_after, answer) =
            send(self.request(reqwest::Method::PUT, &target, body)).await?;
        match status {
            204 => Ok(Committed::Moved),
            409 => Ok(Committed::Behind),
            _ => Err(refused(status, retry_after, &answer)),
        }
    }

    /// The full event behind a thin delivery of the endpoint (`GET
    /// /v1/endpoints/{id}/events/{event_id}`): its body and the signature headers a full
    /// delivery would carry. Not verified here: verify them as a delivery, with the same
    /// verifier ([`ThinEvents`](crate::ThinEvents) does). [`FeedError::Gone`] once the
    /// sender erased the payload or it passed its retention.
    pub async fn event(&self, endpoint_id: &str, event_id: &str) -> Result<Fetched, FeedError> {
        checked_id(endpoint_id)?;
        checked_id(event_id)?;
        let target = format!("/v1/endpoints/{endpoint_id}/events/{event_id}");
        let response = self
            .request(reqwest::Method::GET, &target, Vec::new())
            .send()
            .await
            .map_err(|e| FeedError::Transport(e.without_url().to_string()))?;
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect();
        let retry_after = headers
            .iter()
            .find(|(name, _)| name == "retry-after")
            .and_then(|(_, v)| v.trim().parse().ok())
            .map_or(Duration::from_secs(1), Duration::from_secs);
        let body = response
            .bytes()
            .await
            .map_err(|e| FeedError::Transport(e.without_url().to_string()))?
            .to_vec();
        match status {
            200 => Ok(Fetched { headers, body }),
            410 => match serde_json::from_slice::<ErrorBody>(&body).map(|e| e.error) {
                Ok(kxp_api::ErrorCode::Erased) => Err(FeedError::Gone(kxp_api::GoneReason::Erased)),
                Ok(kxp_api::ErrorCode::Expired) => {
                    Err(FeedError::Gone(kxp_api::GoneReason::Expired))
                }
                _ => Err(refused(status, retry_after, &body)),
            },
            _ => Err(refused(status, retry_after, &body)),
        }
    }

    /// A request to the sender's `target`, with the credential: signed over the method, the
    /// target and the body (`kxp_verify::feed_request_message`), or with the token.
    fn request(
        &self,
        method: reqwest::Method,
        target: &str,
        body: Vec<u8>,
    ) -> reqwest::RequestBuilder {
        let request = self
            .http
            .request(method.clone(), format!("{}{target}", self.base));
        let request = match &self.credential {
            Credential::Secret(secret) => {
                let message = feed_request_message(method.as_str(), target, &body);
                let header = Signer::new(secret.feed_key()).sign_now(&message);
                request.header(FEED_SIGNATURE_HEADER, header.to_string())
            }
            Credential::Token(token) => request.bearer_auth(token),
        };
        if body.is_empty() {
            request
        } else {
            request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
        }
    }
}

/// The full event of a thin delivery, as fetched ([`FeedClient::event`]): unverified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The answer's headers (names in lowercase): the signature headers among them.
    pub headers: Vec<(String, String)>,
    /// The envelope, byte for byte as a full delivery carries it.
    pub body: Vec<u8>,
}

impl Fetched {
    /// The value of the header `name` (lowercase), as bytes; empty when absent.
    pub fn header(&self, name: &str) -> &[u8] {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&b""[..], |(_, v)| v.as_bytes())
    }
}

/// What a cursor commit did ([`FeedClient::commit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The cursor is at the number now (or was already).
    Moved,
    /// It is past the number already: another reader committed further.
    Behind,
}

/// How long a feed request may take, beyond a long poll's wait.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Refuses an endpoint id that would need escaping in the signed target (an endpoint id is
/// `ep_` and hex): as the sender would, without asking it.
fn checked_id(endpoint_id: &str) -> Result<(), FeedError> {
    if endpoint_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Ok(())
    } else {
        Err(FeedError::Unauthorized)
    }
}

/// Sends `request`: the status, the `Retry-After` (1 s without one) and the body.
async fn send(request: reqwest::RequestBuilder) -> Result<(u16, Duration, Vec<u8>), FeedError> {
    let response = request
        .send()
        .await
        .map_err(|e| FeedError::Transport(e.without_url().to_string()))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs);
    let body = response
        .bytes()
        .await
        .map_err(|e| FeedError::Transport(e.without_url().to_string()))?;
    Ok((status, retry_after, body.to_vec()))
}

/// The error of an answer that is not the one asked for: 401, 429 (a rate limit or too many
/// long polls), or anything else with what its body said.
fn refused(status: u16, retry_after: Duration, body: &[u8]) -> FeedError {
    match status {
        401 => FeedError::Unauthorized,
        429 => FeedError::RateLimited(retry_after),
        _ => FeedError::Unexpected {
            status,
            message: serde_json::from_slice::<ErrorBody>(body)
                .map(|e| format!("{}: {}", e.error, e.message))
                .unwrap_or_else(|_| String::from_utf8_lossy(body).chars().take(200).collect()),
        },
    }
}

/// Refuses `base` unless it is `https://`, or `http://` to a loopback host.
fn secure(base: &str) -> Result<(), FeedError> {
    let url = reqwest::Url::parse(base).map_err(|e| FeedError::InvalidUrl(e.to_string()))?;
    let host = url.host_str().unwrap_or_default();
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(host) => Ok(()),
        scheme => Err(FeedError::InsecureUrl {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
        }),
    }
}

/// Whether a URL's host (as the URL parser normalized it: IPv6 in brackets, IPv4 dotted,
/// names in lowercase) is this machine.
fn is_loopback(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    }
    host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses a page that is not `endpoint_id`'s answer to `after`, or whose frame MAC (over
/// `latest`) or an item's MAC under `item_key` is missing or wrong: checked before anything
/// reads the page's `latest` or an item's number, event or ordering key.
fn authentic(
    page: &FeedPage,
    endpoint_id: &str,
    after: u64,
    item_key: &Secret,
) -> Result<(), FeedError> {
    if page.endpoint_id.as_str() != endpoint_id {
        // The page's own id is not repeated: it is whatever the altered page says.
        return Err(FeedError::Forged(format!(
            "the page asked for as endpoint {endpoint_id}'s names another endpoint"
        )));
    }
    let frame = FeedPageFields::page(endpoint_id, after, page.latest);
    match page.mac.as_deref() {
        None => {
            return Err(FeedError::Forged(
                "the page has no mac (stripped on the way, or a sender older than this \
                 kxp-catchup: upgrade the sender first)"
                    .to_owned(),
            ));
        }
        Some(mac) if !frame.verify_mac(item_key, mac) => {
            return Err(FeedError::Forged(format!(
                "the page's mac does not match its latest number ({}) for after={after}",
                page.latest
            )));
        }
        Some(_) => {}
    }
    for item in &page.items {
        let fields = FeedItemFields {
            endpoint_id,
            sequence: item.sequence,
            event_id: item.event_id.as_str(),
            ordering_key: item.ordering_key.as_deref(),
            body: item.body.as_bytes(),
        };
        match item.mac.as_deref() {
            None => {
                return Err(FeedError::Forged(format!(
                    "an item numbered {} has no mac (stripped on the way, or a sender older \
                     than this kxp-catchup)",
                    item.sequence
                )));
            }
            Some(mac) if !fields.verify_mac(item_key, mac) => {
                return Err(FeedError::Forged(format!(
                    "the mac of an item numbered {} does not match it",
                    item.sequence
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}
