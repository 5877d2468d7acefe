//! One HTTP attempt: sign, POST, follow redirects by the sender's rules, and classify what
//! came back. No database here: the worker records what this returns.
//!
//! Every connection goes through the [address guard](crate::engine::guard): IP-literal hosts (the
//! first URL and every redirect hop) are checked before the request is sent, and host names
//! by the client's resolver, which connects only to the addresses it checked. A refused
//! address fails the attempt with `blocked_address`, and nothing is sent.

use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, StatusCode};
use kxp_verify::{Secret, Signer};
use reqwest::{Client, Url};

use crate::engine::guard::{AddressGuard, BlockedName, GuardedResolver};
use crate::model::{Failure, FailureKind};

/// How many redirects an attempt follows; one more fails the attempt.
pub const MAX_REDIRECTS: usize = 2;

/// How much of a response body is kept with the attempt: enough to see an error message, never
/// enough to store a whole page.
pub const SNIPPET_BYTES: usize = 1024;

/// How long the start of a response body is waited for, once the status line has come: the
/// status decides the outcome, so a body that stalls only shortens the snippet, and never turns
/// an accepted delivery into a timeout (which would send it again).
pub const SNIPPET_WAIT: Duration = Duration::from_secs(1);

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A 2xx.
    Delivered {
        /// The status.
        status: u16,
        /// The start of the body.
        snippet: String,
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
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Delivered { status, .. } | Outcome::Rejected { status, .. } => Some(*status),
            Outcome::Failed(_) => None,
        }
    }
}

/// The request an attempt sends.
#[derive(Debug, Clone)]
pub struct Request<'a> {
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
    /// The endpoint's live secrets, newest first: one `v1` each.
    pub secrets: &'a [String],
    /// The whole attempt, redirects included, must end within this.
    pub timeout: Duration,
    /// Whether `https` → `http` redirects are allowed (development only).
    pub allow_http: bool,
}

/// The shared HTTP client, with the address guard it enforces: no automatic redirects (they
/// would turn a POST into a GET, and [`send`] checks each hop itself), no proxy from the
/// environment (a proxy would resolve names beyond the guard's reach), and a DNS resolver that
/// hands over only addresses the guard let through. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GuardedClient {
    http: Client,
    guard: AddressGuard,
}

impl GuardedClient {
    /// The address guard this client enforces.
    pub fn guard(&self) -> &AddressGuard {
        &self.guard
    }
}

/// Builds the shared HTTP client around `guard`. There is no fallback to an unguarded client:
/// if this fails, nothing is sent.
pub fn client(guard: AddressGuard) -> Result<GuardedClient, reqwest::Error> {
    let http = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(GuardedResolver::new(guard.clone()))
        .user_agent(concat!("kxp-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()?;
    Ok(GuardedClient { http, guard })
}

/// Sends one attempt and says how it went: the status line must come within `request.timeout`
/// (redirects included); then at most [`SNIPPET_WAIT`] more for the start of the body.
pub async fn send(client: &GuardedClient, request: &Request<'_>) -> (Outcome, Duration) {
    let started = Instant::now();
    let outcome = match tokio::time::timeout(request.timeout, follow(client, request)).await {
        Ok(Answer::Done(outcome)) => outcome,
        Ok(Answer::Delivered(response)) => Outcome::Delivered {
            status: response.status().as_u16(),
            snippet: snippet(response).await,
        },
        Ok(Answer::Rejected(response)) => rejected(response).await,
        Err(_) => Outcome::Failed(Failure::new(
            FailureKind::Timeout,
            format!("no answer within {} ms", request.timeout.as_millis()),
        )),
    };
    (outcome, started.elapsed())
}

/// How far [`follow`] got within the attempt's timeout: an outcome already, or a final
/// response whose body is still to be read (outside that timeout).
enum Answer {
    Done(Outcome),
    Delivered(reqwest::Response),
    Rejected(reqwest::Response),
}

async fn follow(client: &GuardedClient, request: &Request<'_>) -> Answer {
    let headers = match headers(request) {
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
        if let Err(blocked) = client.guard.check_url(&url) {
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
        let response = match client
            .http
            .post(url.clone())
            .headers(headers.clone())
            .body(request.payload.to_owned())
            .send()
            .await
        {
            Ok(response) => response,
            Err(e) => return Answer::Done(Outcome::Failed(describe(&e))),
        };
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

/// The endpoint challenge: `GET <url>?challenge=<token>` (`&challenge=` when the URL already has
/// a query) with a fresh token of 32 hex digits, through the guarded client, within `timeout`.
/// The endpoint passes when it answers 2xx with the token as the whole body (trailing
/// whitespace aside), which kxp receivers do; redirects are not followed. On failure, says what
/// came back: the status and the body's length, never its content (quoting it would let anyone
/// with an API key read a loopback or allow-listed service through this call), or why nothing
/// did.
pub async fn challenge(client: &GuardedClient, url: &str, timeout: Duration) -> Result<(), String> {
    let mut url = Url::parse(url).map_err(|e| format!("invalid_url: {e}"))?;
    let token = challenge_token();
    url.query_pairs_mut().append_pair("challenge", &token);
    match tokio::time::timeout(timeout, ask(client, url, &token)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "timeout: no answer within {} ms",
            timeout.as_millis()
        )),
    }
}

async fn ask(client: &GuardedClient, url: Url, token: &str) -> Result<(), String> {
    client
        .guard
        .check_url(&url)
        .map_err(|blocked| format!("blocked_address: {blocked}"))?;
    let response = client
        .http
        .get(url)
        .send()
        .await
        .map_err(|e| describe(&e).to_string())?;
    let status = response.status();
    let body = snippet(response).await;
    if status.is_success() && body.trim_end() == token {
        return Ok(());
    }
    let redirect = if status.is_redirection() {
        " (redirects are not followed: register the final URL)"
    } else {
        ""
    };
    let length = if body.len() >= SNIPPET_BYTES {
        format!("at least {SNIPPET_BYTES} bytes")
    } else {
        format!("{} bytes", body.len())
    };
    Err(format!(
        "answered {status}{redirect} with a body of {length}, not the challenge token"
    ))
}

/// 16 bytes from the OS CSPRNG as 32 hex digits: unguessable, and URL-safe as it is.
fn challenge_token() -> String {
    let mut bytes = [0u8; 16];
    // As for secrets: with no OS randomness there is nothing sensible left to do.
    getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    hex::encode(bytes)
}

fn headers(request: &Request<'_>) -> Result<HeaderMap, Failure> {
    let no_secret = |e: kxp_verify::ConfigError| Failure::new(FailureKind::NoSecret, e.to_string());
    let secrets = request
        .secrets
        .iter()
        .map(Secret::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(no_secret)?;
    let signer = Signer::with_secrets(secrets).map_err(no_secret)?;
    let signature = signer.sign_now(request.payload.as_bytes()).to_string();
    let mut headers = HeaderMap::new();
    let mut put = |name: &'static str, value: &str| -> Result<(), Failure> {
        let value = HeaderValue::from_str(value)
            .map_err(|_| Failure::new(FailureKind::InvalidHeader, name))?;
        headers.insert(name, value);
        Ok(())
    };
    put("x-kxp-signature", &signature)?;
    put("x-kxp-event-id", request.event_id)?;
    put("x-kxp-event-type", request.event_type)?;
    put("x-kxp-delivery-id", request.delivery_id)?;
    put("x-kxp-attempt", &request.attempt.to_string())?;
    put("content-type", "application/json")?;
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

/// `Retry-After` in seconds. (The HTTP-date form is rare from webhook receivers and is ignored:
/// the schedule's own delay applies then.)
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
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

fn describe(error: &reqwest::Error) -> Failure {
    // A name the resolver refused: its error says so first, and nothing was connected.
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(blocked) = cause.downcast_ref::<BlockedName>() {
            return Failure::new(
                FailureKind::BlockedAddress,
                format!("{}: {}", blocked.name, blocked.blocked),
            );
        }
        source = cause.source();
    }
    let kind = if error.is_timeout() {
        FailureKind::Timeout
    } else if error.is_connect() {
        FailureKind::Connect
    } else {
        FailureKind::Request
    };
    // reqwest's Display names the URL, which holds nothing secret (secrets travel in headers).
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    Failure::new(kind, text)
}
