//! One HTTP attempt: sign, POST, follow redirects by the sender's rules, and classify what
//! came back. No database here: the worker records what this returns.
//!
//! Every connection goes through the [address guard](crate::engine::guard): IP-literal hosts (the
//! first URL and every redirect hop) are checked before the request is sent, and host names
//! by the client's resolver, which connects only to the addresses it checked (or, through an
//! [egress proxy](crate::engine::egress), tunnels only to them). A refused address fails the
//! attempt with `blocked_address`, and nothing is sent.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use kxp_api::Format;
use kxp_verify::{Secret, Signer, SigningKey, TraceParent};
use reqwest::Url;

use crate::engine::egress;
use crate::model::{Failure, FailureKind, Key, Material};

pub(crate) use challenge::challenge;
pub(crate) use client::{GuardedClient, client, client_with};

/// How many redirects an attempt follows; one more fails the attempt.
pub(crate) const MAX_REDIRECTS: usize = 2;

/// How much of a response body is kept with the attempt: enough to see an error message, never
/// enough to store a whole page.
pub(crate) const SNIPPET_BYTES: usize = 1024;

/// How long the start of a response body is waited for, once the status line has come: the
/// status decides the outcome, so a body that stalls only shortens the snippet, and never turns
/// an accepted delivery into a timeout (which would send it again).
pub(crate) const SNIPPET_WAIT: Duration = Duration::from_secs(1);

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// A 2xx.
    Delivered {
        /// The status.
        status: u16,
        /// The start of the body.
        snippet: String,
        /// Which of its keys the receiver says verified the request (`X-Kxp-Verified-Key`,
        /// 16 hex digits; anything else there is ignored): how a rotation can tell the
        /// merchant has switched.
        verified_key: Option<String>,
    },
    /// A response, but not a 2xx (after redirects).
    Rejected {
        /// The status.
        status: u16,
        /// The start of the body.
        snippet: String,
        /// `Retry-After` of a 429 or 503, if it gave one.
        retry_after: Option<Duration>,
    },
    /// No usable response: connection refused, timeout, TLS, too many redirects, a refused
    /// address. Its kind is stable (`timeout`, `connect`, `too_many_redirects`, …).
    Failed(Failure),
}

impl Outcome {
    /// The HTTP status, when a response came.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Outcome::Delivered { status, .. } | Outcome::Rejected { status, .. } => Some(*status),
            Outcome::Failed(_) => None,
        }
    }
}

/// The request an attempt sends.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    /// Where.
    pub url: &'a str,
    /// The envelope bytes.
    pub payload: &'a str,
    /// The event id, for `X-Kxp-Event-Id`.
    pub event_id: &'a str,
    /// The event type, for `X-Kxp-Event-Type`.
    pub event_type: &'a str,
    /// The delivery id, for `X-Kxp-Delivery-Id`.
    pub delivery_id: &'a str,
    /// 1-based, for `X-Kxp-Attempt`.
    pub attempt: i64,
    /// The endpoint, for `X-Kxp-Endpoint-Id` (`None` for an account's ops notifications).
    pub endpoint_id: Option<&'a str>,
    /// The delivery's number in the endpoint's sequence, for `X-Kxp-Sequence`, once it has one.
    pub sequence: Option<i64>,
    /// The W3C `traceparent` the request carries (the attempt's span), if any.
    pub traceparent: Option<TraceParent>,
    /// The endpoint's live signing material, newest first: one `v1` per secret, one `v1a`
    /// per Ed25519 key, each in its own format's header.
    pub secrets: &'a [Material],
    /// The endpoint's custom headers and `Authorization` ([`auth`](crate::engine::auth)): sent
    /// first, so that no name of the sender's own can be replaced by one of them.
    pub credentials: &'a [(HeaderName, HeaderValue)],
    /// The whole attempt, redirects included, must end within this.
    pub timeout: Duration,
    /// Whether `https` → `http` redirects are allowed (development only).
    pub allow_http: bool,
}

/// Sends one attempt and says how it went: the status line must come within `request.timeout`
/// (redirects included); then at most [`SNIPPET_WAIT`] more for the start of the body.
pub(crate) async fn send(client: &GuardedClient, request: &Request<'_>) -> (Outcome, Duration) {
    let (outcome, took, _) = send_watching(client, request).await;
    (outcome, took)
}

/// [`send`], and the certificate (DER) the endpoint's server presented, when the first hop was
/// made over TLS and answered.
pub(crate) async fn send_watching(
    client: &GuardedClient,
    request: &Request<'_>,
) -> (Outcome, Duration, Option<Vec<u8>>) {
    let started = crate::model::instant();
    let mut peer = None;
    let outcome =
        match tokio::time::timeout(request.timeout, follow(client, request, &mut peer)).await {
            Ok(Answer::Done(outcome)) => outcome,
            Ok(Answer::Delivered(response)) => Outcome::Delivered {
                status: response.status().as_u16(),
                verified_key: verified_key(&response),
                snippet: snippet(response).await,
            },
            Ok(Answer::Rejected(response)) => rejected(response).await,
            Err(_) => Outcome::Failed(Failure::new(
                FailureKind::Timeout,
                format!("no answer within {} ms", request.timeout.as_millis()),
            )),
        };
    (outcome, started.elapsed(), peer)
}

/// The receiver's `X-Kxp-Verified-Key`, when it is a key fingerprint (16 lowercase hex
/// digits): a receiver's header is not trusted to be anything else.
fn verified_key(response: &reqwest::Response) -> Option<String> {
    let value = response
        .headers()
        .get(kxp_verify::VERIFIED_KEY_HEADER)?
        .to_str()
        .ok()?;
    let fingerprint = value.len() == 16
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    fingerprint.then(|| value.to_owned())
}

/// How far [`follow`] got within the attempt's timeout: an outcome already, or a final
/// response whose body is still to be read (outside that timeout).
enum Answer {
    Done(Outcome),
    Delivered(reqwest::Response),
    Rejected(reqwest::Response),
}

/// `peer` gets the certificate the first hop's server presented.
async fn follow(
    client: &GuardedClient,
    request: &Request<'_>,
    peer: &mut Option<Vec<u8>>,
) -> Answer {
    let mut headers = match headers(request) {
        Ok(headers) => headers,
        Err(failure) => return Answer::Done(Outcome::Failed(failure)),
    };
    let mut url = match Url::parse(request.url) {
        Ok(url) => url,
        Err(e) => {
            return Answer::Done(Outcome::Failed(Failure::new(
                FailureKind::InvalidUrl,
                e.to_string(),
            )));
        }
    };
    for hop in 0..=MAX_REDIRECTS {
        // IP-literal hosts never reach the resolver: check them here, before anything is sent.
        if let Err(blocked) = client.guard().check_url(&url) {
            let detail = if hop == 0 {
                blocked.to_string()
            } else {
                format!("redirect {hop}: {blocked}")
            };
            return Answer::Done(Outcome::Failed(Failure::new(
                FailureKind::BlockedAddress,
                detail,
            )));
        }
        let body = Bytes::copy_from_slice(request.payload.as_bytes());
        let response = match client
            .execute(Method::POST, &url, headers.clone(), body)
            .await
        {
            Ok(response) => response,
            Err(failure) => return Answer::Done(Outcome::Failed(failure)),
        };
        if hop == 0 {
            let extensions = response.extensions();
            *peer = match extensions.get::<egress::PeerCertificate>() {
                Some(tunnelled) => Some(tunnelled.0.clone()),
                None => extensions
                    .get::<reqwest::tls::TlsInfo>()
                    .and_then(reqwest::tls::TlsInfo::peer_certificate)
                    .map(<[u8]>::to_vec),
            };
        }
        let status = response.status();
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            let Some(next) = location(&url, response.headers()) else {
                return Answer::Rejected(response);
            };
            if hop == MAX_REDIRECTS {
                return Answer::Done(Outcome::Failed(too_many_redirects()));
            }
            if url.scheme() == "https" && next.scheme() != "https" && !request.allow_http {
                return Answer::Done(Outcome::Failed(Failure::new(
                    FailureKind::InsecureRedirect,
                    "https redirected to http",
                )));
            }
            if !matches!(next.scheme(), "http" | "https") {
                return Answer::Done(Outcome::Failed(Failure::new(
                    FailureKind::InvalidRedirect,
                    format!("scheme `{}` is not http(s)", next.scheme()),
                )));
            }
            // The endpoint's credentials are for its own origin: a redirect elsewhere gets the
            // delivery without them (as browsers drop `Authorization`), never a gateway key or a
            // token it could replay.
            if next.origin() != url.origin() {
                for (name, _) in request.credentials {
                    headers.remove(name);
                }
            }
            url = next;
            continue;
        }
        if status.is_success() {
            return Answer::Delivered(response);
        }
        return Answer::Rejected(response);
    }
    Answer::Done(Outcome::Failed(too_many_redirects()))
}

fn too_many_redirects() -> Failure {
    Failure::new(
        FailureKind::TooManyRedirects,
        format!("more than {MAX_REDIRECTS} redirects"),
    )
}

fn headers(request: &Request<'_>) -> Result<HeaderMap, Failure> {
    let mut headers = HeaderMap::new();
    for (name, value) in request.credentials {
        headers.insert(name.clone(), value.clone());
    }
    let mut put = |name: &'static str, value: &str| -> Result<(), Failure> {
        let value = HeaderValue::from_str(value)
            .map_err(|_| Failure::new(FailureKind::InvalidHeader, name))?;
        headers.insert(name, value);
        Ok(())
    };
    for (name, value) in signatures(request)? {
        put(name, &value)?;
    }
    put("x-kxp-event-id", request.event_id)?;
    put("x-kxp-event-type", request.event_type)?;
    put("x-kxp-delivery-id", request.delivery_id)?;
    put("x-kxp-attempt", &request.attempt.to_string())?;
    // Hints, outside the signature like the three above: a receiver uses them only to notice a
    // gap early, and finds what is missing in the signed feed.
    if let Some(endpoint_id) = request.endpoint_id {
        put("x-kxp-endpoint-id", endpoint_id)?;
    }
    if let Some(sequence) = request.sequence {
        put("x-kxp-sequence", &sequence.to_string())?;
    }
    // Outside the signature too: it proves nothing about the trace, only names one.
    if let Some(traceparent) = request.traceparent {
        put("traceparent", &traceparent.to_string())?;
    }
    put("content-type", "application/json")?;
    Ok(headers)
}

/// One format's share of the material: its secrets and keys, newest first.
#[derive(Default)]
struct Signers<'m> {
    secrets: Vec<Secret>,
    keys: Vec<&'m SigningKey>,
}

impl Signers<'_> {
    fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.keys.is_empty()
    }

    fn signer(&self) -> Result<Option<Signer>, Failure> {
        if self.secrets.is_empty() {
            return Ok(None);
        }
        Signer::with_secrets(self.secrets.iter().cloned())
            .map(Some)
            .map_err(|e| Failure::new(FailureKind::NoSecret, e.to_string()))
    }
}

/// The signature headers for the request now, one timestamp for all: `X-Kxp-Signature`
/// (`t`, one `v1` per HMAC secret, then one `v1a` per Ed25519 key, each newest first) for the
/// `kxp` material, and `webhook-id`, `webhook-timestamp`, `webhook-signature` (the `v1,` items,
/// then the `v1a,` items, space-separated) for the Standard Webhooks material. An endpoint
/// changing format has both until the older material expires.
fn signatures(request: &Request<'_>) -> Result<Vec<(&'static str, String)>, Failure> {
    signature_headers(request.event_id, request.payload, request.secrets)
}

/// [`signatures`] of `payload` for the event `id` with `secrets`, for any request that carries
/// an event as a delivery does (an attempt, an item of the catch-up feed).
pub(crate) fn signature_headers(
    id: &str,
    payload: &str,
    secrets: &[Material],
) -> Result<Vec<(&'static str, String)>, Failure> {
    let mut kxp = Signers::default();
    let mut standard = Signers::default();
    for material in secrets {
        let signers = match material.format {
            Format::StandardWebhooks => &mut standard,
            _ => &mut kxp,
        };
        match &material.key {
            Key::Hmac(secret) => signers.secrets.push(secret.clone()),
            Key::Ed25519(key) => signers.keys.push(key),
        }
    }
    if kxp.is_empty() && standard.is_empty() {
        return Err(Failure::new(
            FailureKind::NoSecret,
            "the endpoint has no live secret or key that can sign (see the server's log)",
        ));
    }
    let t = crate::model::unix_seconds();
    let body = payload.as_bytes();
    let mut headers = Vec::with_capacity(4);
    if !kxp.is_empty() {
        let mut header = match kxp.signer()? {
            Some(signer) => signer.sign(t, body).to_string(),
            None => format!("t={t}"),
        };
        for key in &kxp.keys {
            header.push_str(",v1a=");
            header.push_str(&STANDARD.encode(key.sign(t, body).signature()));
        }
        headers.push(("x-kxp-signature", header));
    }
    if !standard.is_empty() {
        let invalid_id = |_| Failure::new(FailureKind::InvalidHeader, "webhook-id");
        let mut items = Vec::with_capacity(standard.secrets.len() + standard.keys.len());
        if let Some(signer) = standard.signer()? {
            items.push(
                signer
                    .sign_standard(id, t, body)
                    .map_err(invalid_id)?
                    .to_string(),
            );
        }
        for key in &standard.keys {
            items.push(
                key.sign_standard(id, t, body)
                    .map_err(invalid_id)?
                    .to_string(),
            );
        }
        headers.push(("webhook-id", id.to_owned()));
        headers.push(("webhook-timestamp", t.to_string()));
        headers.push(("webhook-signature", items.join(" ")));
    }
    Ok(headers)
}

fn location(base: &Url, headers: &HeaderMap) -> Option<Url> {
    let location = headers.get(http::header::LOCATION)?.to_str().ok()?;
    base.join(location).ok()
}

async fn rejected(response: reqwest::Response) -> Outcome {
    let status = response.status();
    let retry_after = matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    )
    .then(|| retry_after(response.headers()))
    .flatten();
    Outcome::Rejected {
        status: status.as_u16(),
        snippet: snippet(response).await,
        retry_after,
    }
}

/// `Retry-After` as a delay from now: seconds, or an HTTP-date (RFC 9110 §10.2.3). The schedule
/// caps it ([`MAX_RETRY_AFTER`](crate::policy::schedule::MAX_RETRY_AFTER)) either way; a value
/// that is neither form is ignored, and the schedule's own delay applies.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    retry_after_from(value, crate::model::utc_now())
}

/// [`retry_after`] with the clock passed in. A date in the past asks for no extra delay.
fn retry_after_from(value: &str, now: time::OffsetDateTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = http_date(value, now)?;
    Some(Duration::try_from(at - now).unwrap_or(Duration::ZERO))
}

/// An HTTP-date in any of its three forms, all in GMT: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37
/// GMT`, the one senders must use), and the obsolete RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`)
/// and asctime (`Sun Nov  6 08:49:37 1994`) forms that recipients must still accept.
fn http_date(value: &str, now: time::OffsetDateTime) -> Option<time::OffsetDateTime> {
    use time::macros::format_description;
    use time::{PrimitiveDateTime, parsing::Parsed};

    let imf_fixdate = format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    let asctime = format_description!(
        "[weekday repr:short] [month repr:short] [day padding:space] [hour]:[minute]:[second] [year]"
    );
    let rfc850 = format_description!(
        "[weekday], [day]-[month repr:short]-[year repr:last_two] [hour]:[minute]:[second] GMT"
    );
    if let Ok(at) = PrimitiveDateTime::parse(value, imf_fixdate)
        .or_else(|_| PrimitiveDateTime::parse(value, asctime))
    {
        return Some(at.assume_utc());
    }
    let mut parsed = Parsed::new();
    if !parsed
        .parse_items(value.as_bytes(), rfc850)
        .ok()?
        .is_empty()
    {
        return None;
    }
    // The year with those last two digits that is at most 50 years ahead (a later one is the
    // latest past year with those digits), so within 50 years either side of now.
    let last_two = i32::from(parsed.year_last_two()?);
    let mut year = now.year() - now.year().rem_euclid(100) + last_two;
    if year > now.year() + 50 {
        year -= 100;
    } else if year <= now.year() - 50 {
        year += 100;
    }
    parsed.set_year(year)?;
    PrimitiveDateTime::try_from(parsed)
        .ok()
        .map(PrimitiveDateTime::assume_utc)
}

/// The first [`SNIPPET_BYTES`] of the body, or what came of them within [`SNIPPET_WAIT`]; the
/// rest is never read.
async fn snippet(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    let read = async {
        while bytes.len() < SNIPPET_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
                _ => break,
            }
        }
    };
    // A stalled body keeps what arrived: the status already decided the outcome.
    let _ = tokio::time::timeout(SNIPPET_WAIT, read).await;
    bytes.truncate(SNIPPET_BYTES);
    String::from_utf8_lossy(&bytes).into_owned()
}

mod challenge;
mod client;
#[cfg(test)]
mod tests;
