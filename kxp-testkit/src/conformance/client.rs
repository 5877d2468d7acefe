//! The sender's side of the suite: events, signatures (an HMAC of the suite's own, so the
//! receivers are not checked with the code they verify with), and HTTP requests on loopback.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use super::Config;

/// A `payment.succeeded` event with `data: {"amount": …, "currency": …}`, serialized as a
/// sender would.
pub fn event_body(id: &str, amount: i64, currency: &str) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment.succeeded","api_version":"2026-11-01","created_at":"2026-11-30T01:02:03Z","data":{{"amount":{amount},"currency":"{currency}"}}}}"#
    )
}

/// `t=<t>,v1=<hex>` with one `v1` per secret, in order: what a (rotating) sender puts in
/// `X-Kxp-Signature`.
pub fn sign(secrets: &[&str], t: u64, body: &[u8]) -> String {
    let mut header = format!("t={t}");
    for secret in secrets {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .unwrap_or_else(|_| panic!("an HMAC key cannot be empty"));
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        header.push_str(",v1=");
        header.push_str(&hex::encode(mac.finalize().into_bytes()));
    }
    header
}

/// What a receiver answers in `X-Kxp-Verified-Key` when `secret` verified a request: the first
/// 8 bytes, in hex, of SHA-256 over `"kxp-key-id\0"` and the secret's bytes (computed here, not
/// with kxp-verify's `key_fingerprint`).
pub fn key_id(secret: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"kxp-key-id\0")
        .chain_update(secret.as_bytes())
        .finalize();
    hex::encode(&digest[..8])
}

/// The receiver's time: its pinned clock, or the system's.
pub fn now(config: &Config) -> u64 {
    config.now.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    })
}

/// What a receiver answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// `Retry-After`, in seconds, if present (a number, or the test fails).
    pub retry_after: Option<u64>,
    /// `Content-Type`, if present.
    pub content_type: Option<String>,
    /// `X-Content-Type-Options`, if present.
    pub nosniff: Option<String>,
    /// `X-Kxp-Verified-Key`, if present: which secret verified the request ([`key_id`]).
    pub verified_key: Option<String>,
    /// The body, as text.
    pub body: String,
}

impl Answer {
    /// The status and the body, for one `assert_eq!`.
    pub fn pair(&self) -> (u16, &str) {
        (self.status, self.body.as_str())
    }
}

/// A client for plain HTTP to 127.0.0.1, never through a proxy from the environment.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap_or_else(|e| panic!("cannot build an HTTP client: {e}"))
}

/// Sends `request`; `Err` when no answer came (the receiver died or cut the connection).
pub(crate) async fn try_send(request: reqwest::RequestBuilder) -> Result<Answer, reqwest::Error> {
    let response = request.send().await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
    };
    let retry_after = header("retry-after").map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("Retry-After is not a number of seconds: {v:?}"))
    });
    let content_type = header("content-type");
    let nosniff = header("x-content-type-options");
    let verified_key = header("x-kxp-verified-key");
    let status = response.status().as_u16();
    let body = response.text().await?;
    Ok(Answer {
        status,
        retry_after,
        content_type,
        nosniff,
        verified_key,
        body,
    })
}

/// Sends `request`; panics when no answer came.
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Answer {
    try_send(request).await.unwrap_or_else(|e| {
        let mut causes = String::new();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            causes.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        panic!("no answer from the receiver: {e}{causes}")
    })
}

/// `POST <url>` with `body` and, when given, `X-Kxp-Signature: <header>`.
pub(crate) async fn post(
    url: &str,
    header: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> Answer {
    let mut request = client().post(url).body(body);
    if let Some(header) = header {
        request = request.header("X-Kxp-Signature", header);
    }
    send(request).await
}

/// A delivery as the sender makes it: `body`, signed now with the configured secrets (newest
/// first), `Content-Type: application/json`, and `X-Kxp-Event-Id` when given.
pub(crate) fn delivery(
    url: &str,
    config: &Config,
    body: &str,
    event_id_header: Option<&str>,
) -> reqwest::RequestBuilder {
    let secrets: Vec<&str> = config.secrets.iter().map(String::as_str).collect();
    let mut request = client()
        .post(url)
        .header(
            "X-Kxp-Signature",
            sign(&secrets, now(config), body.as_bytes()),
        )
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    if let Some(id) = event_id_header {
        request = request.header("X-Kxp-Event-Id", id);
    }
    request
}

/// [`delivery`], sent; panics when no answer came.
pub(crate) async fn deliver(url: &str, config: &Config, body: &str) -> Answer {
    send(delivery(url, config, body, None)).await
}

/// `{"outcome":"<name>"}`, the body of the dedup glue's answers.
pub(crate) fn outcome(name: &str) -> String {
    format!(r#"{{"outcome":"{name}"}}"#)
}

/// `{"error":"<code>"}`, the body of a rejection.
pub(crate) fn error(code: &str) -> String {
    format!(r#"{{"error":"{code}"}}"#)
}

/// What a receiver answered on the wire to bytes sent as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawAnswer {
    /// The status code of the status line.
    pub status: u16,
    /// The body, as text (de-chunked).
    pub body: String,
}

/// Sends `request` as it is on a fresh connection to the receiver at `url` (over TCP to its
/// `host:port`) and reads one response: for framing that no HTTP client would send.
///
/// The request is written while the answer is read, so a server that refuses a head part-way
/// answers before the rest is sent; the connection stays open for writing until the response is
/// read (a client that half-closes is treated as gone by some servers).
pub(crate) async fn exchange(url: &str, request: Vec<u8>) -> RawAnswer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http:// URL: {url}"));
    let addr = &rest[..rest.find('/').unwrap_or(rest.len())];
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        // A server that answered early may reset the connection on the unread rest.
        let _ = write.write_all(&request).await;
        std::future::pending::<()>().await;
        drop(write);
    });
    let mut received = Vec::new();
    let answer = tokio::time::timeout(super::database::PATIENCE, async {
        let mut buffer = [0u8; 8192];
        loop {
            if let Some(answer) = parse_response(&received) {
                return Some(answer);
            }
            match read.read(&mut buffer).await {
                Ok(0) | Err(_) => return parse_response_at_eof(&received),
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    writer.abort();
    match answer {
        Ok(Some(answer)) => answer,
        Ok(None) => panic!(
            "the connection closed without a whole response: {:?}",
            String::from_utf8_lossy(&received)
        ),
        Err(_) => panic!(
            "no whole response within {:?}: {:?}",
            super::database::PATIENCE,
            String::from_utf8_lossy(&received)
        ),
    }
}

/// A response head: the status code, the headers (names lower-cased), where the body starts.
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    body_start: usize,
}

/// The head of the response in `received`, once it is whole.
fn response_head(received: &[u8]) -> Option<Head> {
    let end = received.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&received[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {status_line:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Some(Head {
        status,
        headers,
        body_start: end + 4,
    })
}

/// A whole response framed by `Content-Length` or chunked, if `received` holds one.
fn parse_response(received: &[u8]) -> Option<RawAnswer> {
    let Head {
        status,
        headers,
        body_start: start,
    } = response_head(received)?;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let body = &received[start..];
    if let Some(length) = header("content-length") {
        let length: usize = length
            .parse()
            .unwrap_or_else(|_| panic!("a bad Content-Length in the response: {length:?}"));
        return (body.len() >= length).then(|| RawAnswer {
            status,
            body: String::from_utf8_lossy(&body[..length]).into_owned(),
        });
    }
    if header("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        return dechunk(body).map(|body| RawAnswer { status, body });
    }
    None
}

/// A response whose body ends with the connection (neither length nor chunks).
fn parse_response_at_eof(received: &[u8]) -> Option<RawAnswer> {
    parse_response(received).or_else(|| {
        let head = response_head(received)?;
        Some(RawAnswer {
            status: head.status,
            body: String::from_utf8_lossy(&received[head.body_start..]).into_owned(),
        })
    })
}

/// A chunked body, once its last chunk is in.
fn dechunk(mut body: &[u8]) -> Option<String> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size = String::from_utf8_lossy(&body[..line_end]);
        let size = usize::from_str_radix(size.split(';').next().unwrap_or_default().trim(), 16)
            .unwrap_or_else(|_| panic!("a bad chunk size in the response: {size:?}"));
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(String::from_utf8_lossy(&out).into_owned());
        }
        if body.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}
