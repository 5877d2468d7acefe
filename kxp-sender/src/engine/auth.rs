//! What an attempt presents beside its signature: the endpoint's custom headers and its `auth`
//! (`Authorization: Basic`, a bearer token, or an OAuth2 access token fetched with the client
//! credentials grant, RFC 6749 §4.4).
//!
//! OAuth2 tokens are cached per endpoint in this process ([`Tokens`]) until shortly before they
//! expire, and fetched one at a time however many attempts wait: the others wait for that fetch
//! and use its token, or fail with its error. A 401 from the endpoint drops the token it was
//! sent with, so the next attempt fetches a fresh one. The token endpoint is reached through the
//! guarded client, like endpoint URLs: the address guard, no proxy, no redirects followed; with
//! the public roots and no client certificate, whatever the endpoint's own `tls` says (an
//! identity provider is rarely on the merchant's private PKI).
//!
//! A credential never reaches an error's text: a token endpoint's failure says its status and
//! its OAuth2 `error` code, never its body.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderName, HeaderValue};
use kxp_api::{ClientAuth, EndpointAuth};
use reqwest::Url;
use sha2_std::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::engine::dispatch::{GuardedClient, Outcome};
use crate::model::{Credentials, EndpointId, Failure, FailureKind, instant};
use crate::store::seal::KeyRing;

/// How long a token without `expires_in` is used (unless the endpoint refuses it first).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// The longest a token is used, whatever its `expires_in` says.
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// How long before its expiry a token is fetched anew: a tenth of its lifetime, at most this.
const MAX_REFRESH_MARGIN: Duration = Duration::from_secs(30);

/// The most of a token endpoint's answer that is read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// How many endpoints' token slots a process keeps before it forgets the idle ones.
const MAX_SLOTS: usize = 10_000;

/// The headers an attempt adds for its endpoint's credentials, and the OAuth2 token among
/// them, if any (dropped by [`Tokens::after`] when the endpoint answers 401).
#[derive(Default)]
pub(crate) struct Presented {
    /// Custom headers, then `Authorization`; every value marked sensitive.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The endpoint's own client, for an endpoint with `tls` (its certificate, its roots).
    pub client: Option<GuardedClient>,
    token: Option<Zeroizing<String>>,
}

/// This process's OAuth2 tokens, one slot per endpoint.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    slots: Mutex<HashMap<EndpointId, Arc<tokio::sync::Mutex<Slot>>>>,
}

/// One endpoint's token, and its last failure (what attempts that waited for it are told).
#[derive(Debug, Default)]
struct Slot {
    token: Option<Token>,
    failed: Option<(Instant, [u8; 32], Failure)>,
}

struct Token {
    value: Zeroizing<String>,
    /// The digest of the configuration that fetched it: a changed client, secret, scope or
    /// token URL fetches anew.
    config: [u8; 32],
    refresh_at: Instant,
}

/// An OAuth2 client-credentials configuration, borrowed from an endpoint's `auth`.
struct Client<'a> {
    token_url: &'a str,
    client_id: &'a str,
    client_secret: &'a str,
    scope: Option<&'a str>,
    audience: Option<&'a str>,
    client_auth: &'a ClientAuth,
}

impl Client<'_> {
    fn digest(&self) -> [u8; 32] {
        let mut hash = Sha256::new();
        for part in [
            self.token_url,
            self.client_id,
            self.client_secret,
            self.scope.unwrap_or("\0"),
            self.audience.unwrap_or("\0"),
            self.client_auth.as_str(),
        ] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part.as_bytes());
        }
        hash.finalize().into()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("refresh_at", &self.refresh_at)
            .finish_non_exhaustive()
    }
}

fn failed(detail: impl Into<String>) -> Failure {
    Failure::new(FailureKind::AuthFailed, detail)
}

/// A header for a credential: marked sensitive (HTTP/2 never indexes it).
fn sensitive(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), Failure> {
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| failed(format!("header name `{name}` is not valid")))?;
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| failed(format!("the value of `{name}` is not a valid header value")))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// The custom headers, and `Authorization` for Basic and bearer `auth`.
fn fixed(credentials: &Credentials) -> Result<Vec<(HeaderName, HeaderValue)>, Failure> {
    let mut headers = credentials
        .headers
        .iter()
        .map(|(name, value)| sensitive(name, value.expose()))
        .collect::<Result<Vec<_>, _>>()?;
    match &credentials.auth {
        Some(EndpointAuth::Basic { username, password }) => {
            let pair = Zeroizing::new(format!("{username}:{}", password.expose()));
            let value = Zeroizing::new(format!("Basic {}", STANDARD.encode(pair.as_bytes())));
            headers.push(sensitive("authorization", &value)?);
        }
        Some(EndpointAuth::Bearer { token }) => {
            let value = Zeroizing::new(format!("Bearer {}", token.expose()));
            headers.push(sensitive("authorization", &value)?);
        }
        _ => {}
    }
    Ok(headers)
}

fn oauth2(credentials: &Credentials) -> Option<Client<'_>> {
    match &credentials.auth {
        Some(EndpointAuth::Oauth2ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scope,
            audience,
            client_auth,
        }) => Some(Client {
            token_url,
            client_id,
            client_secret: client_secret.expose(),
            scope: scope.as_deref(),
            audience: audience.as_deref(),
            client_auth,
        }),
        _ => None,
    }
}

/// Opens an endpoint's stored credentials. One that does not open (a key ring changed under a
/// running fleet) or does not read (altered by hand) fails the attempt, which is retried: an
/// endpoint that asked for credentials never gets a request without them.
pub(crate) fn open(
    ring: Option<&KeyRing>,
    endpoint_id: &EndpointId,
    stored: &str,
) -> Result<Credentials, Failure> {
    crate::store::open_credentials(ring, endpoint_id, stored).map_err(|e| {
        tracing::error!(
            target: "kxp_sender", endpoint_id = %endpoint_id, error = %e,
            "the endpoint's credentials do not open or do not read"
        );
        failed(format!(
            "the endpoint's credentials do not open ({e}); see the server's log"
        ))
    })
}

impl Tokens {
    /// What an attempt to `endpoint_id` presents for `credentials`: a cached OAuth2 token, or
    /// one fetched now within `timeout`.
    pub(crate) async fn present(
        &self,
        client: &GuardedClient,
        endpoint_id: &EndpointId,
        credentials: &Credentials,
        timeout: Duration,
        allow_http: bool,
    ) -> Result<Presented, Failure> {
        let mut headers = fixed(credentials)?;
        let Some(oauth) = oauth2(credentials) else {
            return Ok(Presented {
                headers,
                client: None,
                token: None,
            });
        };
        let token = self
            .token(endpoint_id, &oauth, async {
                fetch(client, &oauth, timeout, allow_http).await
            })
            .await?;
        let value = Zeroizing::new(format!("Bearer {}", token.as_str()));
        headers.push(sensitive("authorization", &value)?);
        Ok(Presented {
            headers,
            client: None,
            token: Some(token),
        })
    }

    /// Drops the token an attempt was sent with when the endpoint refused it (401), unless a
    /// newer one replaced it meanwhile: however many attempts the 401s end, one fetch follows.
    pub(crate) async fn after(
        &self,
        endpoint_id: &EndpointId,
        presented: &Presented,
        outcome: &Outcome,
    ) {
        let (Some(used), Outcome::Rejected { status: 401, .. }) = (&presented.token, outcome)
        else {
            return;
        };
        let Some(slot) = self.existing(endpoint_id) else {
            return;
        };
        let mut slot = slot.lock().await;
        if slot.token.as_ref().is_some_and(|t| t.value == *used) {
            slot.token = None;
            tracing::info!(
                target: "kxp_sender", endpoint_id = %endpoint_id,
                "the endpoint answered 401: its OAuth2 token is dropped, the next attempt fetches one"
            );
        }
    }

    fn existing(&self, endpoint_id: &EndpointId) -> Option<Arc<tokio::sync::Mutex<Slot>>> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.get(endpoint_id).cloned()
    }

    fn slot(&self, endpoint_id: &EndpointId) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if slots.len() >= MAX_SLOTS && !slots.contains_key(endpoint_id) {
            // Forget the slots no attempt holds: their tokens are fetched again when needed.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        slots.entry(endpoint_id.clone()).or_default().clone()
    }

    /// The endpoint's token for `oauth`: the cached one while it is fresh; else the one `fetch`
    /// gets, fetched by one attempt at a time. An attempt that waited while a fetch failed gets
    /// that failure rather than asking again.
    async fn token(
        &self,
        endpoint_id: &EndpointId,
        oauth: &Client<'_>,
        fetch: impl Future<Output = Result<Fetched, Failure>>,
    ) -> Result<Zeroizing<String>, Failure> {
        let asked = instant();
        let config = oauth.digest();
        let slot = self.slot(endpoint_id);
        let mut slot = slot.lock().await;
        if let Some(token) = &slot.token
            && token.config == config
            && instant() < token.refresh_at
        {
            return Ok(token.value.clone());
        }
        if let Some((at, digest, failure)) = &slot.failed
            && *at >= asked
            && *digest == config
        {
            return Err(failure.clone());
        }
        // The lifetime counts from the request: the time the answer took is already spent.
        let requested = instant();
        match fetch.await {
            Ok(fetched) => {
                let lifetime = fetched.lifetime.min(MAX_LIFETIME);
                let margin = (lifetime / 10).min(MAX_REFRESH_MARGIN);
                slot.token = Some(Token {
                    value: fetched.value.clone(),
                    config,
                    refresh_at: requested + (lifetime - margin),
                });
                slot.failed = None;
                Ok(fetched.value)
            }
            Err(failure) => {
                slot.token = None;
                slot.failed = Some((instant(), config, failure.clone()));
                Err(failure)
            }
        }
    }
}

/// The headers the endpoint challenge presents for `credentials`: the same as an attempt's,
/// with an OAuth2 token fetched for the challenge alone (the endpoint has no slot yet). So a
/// gateway that wants them lets the challenge through, and a wrong client secret is found at
/// registration rather than at the first delivery.
pub(crate) async fn for_challenge(
    client: &GuardedClient,
    credentials: &Credentials,
    timeout: Duration,
    allow_http: bool,
) -> Result<Vec<(HeaderName, HeaderValue)>, Failure> {
    let mut headers = fixed(credentials)?;
    if let Some(oauth) = oauth2(credentials) {
        let fetched = fetch(client, &oauth, timeout, allow_http).await?;
        let value = Zeroizing::new(format!("Bearer {}", fetched.value.as_str()));
        headers.push(sensitive("authorization", &value)?);
    }
    Ok(headers)
}

/// A token as the token endpoint gave it.
struct Fetched {
    value: Zeroizing<String>,
    lifetime: Duration,
}

/// Fetches a token with the client credentials grant, within `timeout`.
async fn fetch(
    client: &GuardedClient,
    oauth: &Client<'_>,
    timeout: Duration,
    allow_http: bool,
) -> Result<Fetched, Failure> {
    match tokio::time::timeout(timeout, ask(client, oauth, allow_http)).await {
        Ok(answer) => answer,
        Err(_) => Err(failed(format!(
            "token endpoint: no answer within {} ms",
            timeout.as_millis()
        ))),
    }
}

async fn ask(
    client: &GuardedClient,
    oauth: &Client<'_>,
    allow_http: bool,
) -> Result<Fetched, Failure> {
    let url = Url::parse(oauth.token_url).map_err(|e| failed(format!("token_url: {e}")))?;
    if !(url.scheme() == "https" || (allow_http && url.scheme() == "http")) {
        return Err(failed("token_url: not https"));
    }
    client
        .guard()
        .check_url(&url)
        .map_err(|blocked| failed(format!("token endpoint: {blocked}")))?;
    let post = *oauth.client_auth == ClientAuth::Post;
    // The serializer is not `Send`: the body is made before anything is awaited.
    let body = {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(scope) = oauth.scope {
            form.append_pair("scope", scope);
        }
        if let Some(audience) = oauth.audience {
            form.append_pair("audience", audience);
        }
        if post {
            form.append_pair("client_id", oauth.client_id);
            form.append_pair("client_secret", oauth.client_secret);
        }
        form.finish()
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    headers.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    if !post {
        // RFC 6749 §2.3.1: each form-encoded, then joined with `:` for HTTP Basic.
        let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let pair = Zeroizing::new(format!(
            "{}:{}",
            encode(oauth.client_id),
            encode(oauth.client_secret)
        ));
        let (name, value) = sensitive(
            "authorization",
            &Zeroizing::new(format!("Basic {}", STANDARD.encode(pair.as_bytes()))),
        )?;
        headers.insert(name, value);
    }
    let response = client
        .execute(http::Method::POST, &url, headers, body.into())
        .await
        .map_err(|failure| match failure.kind {
            // The proxy's failure is not the token endpoint's, nor the endpoint's.
            FailureKind::ProxyError => failure,
            _ => failed(format!("token endpoint: {failure}")),
        })?;
    let status = response.status();
    let bytes = read_limited(response).await;
    if !status.is_success() {
        let code = oauth_error(&bytes)
            .map(|code| format!(" (error `{code}`)"))
            .unwrap_or_default();
        let redirect = if status.is_redirection() {
            " (redirects are not followed)"
        } else {
            ""
        };
        return Err(failed(format!(
            "token endpoint answered {status}{code}{redirect}"
        )));
    }
    parse_token(&bytes)
}

async fn read_limited(mut response: reqwest::Response) -> Zeroizing<Vec<u8>> {
    let mut bytes = Zeroizing::new(Vec::new());
    while bytes.len() <= MAX_TOKEN_RESPONSE {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes
}

/// An OAuth2 error response's `error` code (RFC 6749 §5.2), when it is one: a short code of
/// the characters the RFC allows, never any other text of the body.
fn oauth_error(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let code = value.get("error")?.as_str()?;
    (code.len() <= 64 && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then(|| code.to_owned())
}

/// A successful token response (RFC 6749 §5.1): a bearer `access_token` that can be a header
/// value, and `expires_in` in seconds (a number, or a string of digits as some servers send).
fn parse_token(body: &[u8]) -> Result<Fetched, Failure> {
    if body.len() > MAX_TOKEN_RESPONSE {
        return Err(failed(format!(
            "token endpoint's answer is larger than {MAX_TOKEN_RESPONSE} bytes"
        )));
    }
    let not_a_token = || failed("token endpoint's answer is not a token response (RFC 6749 §5.1)");
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| not_a_token())?;
    let token = value
        .get("access_token")
        .and_then(serde_json::Value::as_str)
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(not_a_token)?;
    match value.get("token_type").and_then(serde_json::Value::as_str) {
        Some(kind) if !kind.eq_ignore_ascii_case("bearer") => {
            return Err(failed(format!(
                "token endpoint gave a token of type `{}`, not bearer",
                kind.chars().take(32).collect::<String>()
            )));
        }
        _ => {}
    }
    let lifetime = match value.get("expires_in") {
        None | Some(serde_json::Value::Null) => DEFAULT_LIFETIME,
        Some(seconds) => seconds
            .as_u64()
            .or_else(|| seconds.as_str().and_then(|s| s.parse().ok()))
            .map(Duration::from_secs)
            .ok_or_else(|| failed("token endpoint's `expires_in` is not a number of seconds"))?,
    };
    Ok(Fetched {
        value: Zeroizing::new(token.to_owned()),
        lifetime,
    })
}

#[cfg(test)]
mod tests;
