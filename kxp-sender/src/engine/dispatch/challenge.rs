//! The endpoint challenge: proof, before an endpoint is registered (or its URL changed), that
//! whoever registers it controls the URL and that a receiver answers there.

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use reqwest::Url;

use super::{GuardedClient, SNIPPET_BYTES, snippet};

/// The endpoint challenge: `GET <url>?challenge=<token>` (`&challenge=` when the URL already has
/// a query) with a fresh token of 32 hex digits and the endpoint's `credentials` headers, through the guarded client, within `timeout`.
/// The endpoint passes when it answers 2xx with the token as the whole body (trailing
/// whitespace aside), which kxp receivers do; redirects are not followed. On failure, says what
/// came back: the status and the body's length, never its content (quoting it would let anyone
/// with an API key read a loopback or allow-listed service through this call), or why nothing
/// did.
pub(crate) async fn challenge(
    client: &GuardedClient,
    url: &str,
    credentials: &[(HeaderName, HeaderValue)],
    timeout: Duration,
) -> Result<(), String> {
    let mut url = Url::parse(url).map_err(|e| format!("invalid_url: {e}"))?;
    let token = challenge_token();
    url.query_pairs_mut().append_pair("challenge", &token);
    match tokio::time::timeout(timeout, ask(client, url, credentials, &token)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "timeout: no answer within {} ms",
            timeout.as_millis()
        )),
    }
}

async fn ask(
    client: &GuardedClient,
    url: Url,
    credentials: &[(HeaderName, HeaderValue)],
    token: &str,
) -> Result<(), String> {
    client
        .guard()
        .check_url(&url)
        .map_err(|blocked| format!("blocked_address: {blocked}"))?;
    let mut headers = http::HeaderMap::new();
    for (name, value) in credentials {
        headers.insert(name.clone(), value.clone());
    }
    let response = client
        .execute(http::Method::GET, &url, headers, bytes::Bytes::new())
        .await
        .map_err(|failure| failure.to_string())?;
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
    crate::model::fill_random(&mut bytes);
    hex::encode(bytes)
}
