//! The scenarios about how a request is framed on the wire: sizes of the head, duplicate or
//! conflicting lengths, HTTP/1.0. Sent as raw bytes over TCP, since no HTTP client would send
//! them. Where the middleware sees the request, every receiver answers alike; where the
//! framework's HTTP server library answers before any middleware runs, each library's answer
//! is pinned here (and tabled in `docs/receiving-webhooks.md`), so an upgrade that changes one
//! is noticed.

use super::super::client::{RawAnswer, error, exchange, outcome};
use super::super::{Config, Framework, ReceiverUnderTest, RunningReceiver, event_body};
use super::*;

/// A `POST` to `url` as raw bytes: `version` in the request line, then `Host`, the
/// `signature` and the content type, then `headers` (each a whole line without its CRLF), then
/// `body` as it is (already chunked, for a chunked request).
fn raw_request(
    url: &str,
    version: &str,
    signature: &str,
    headers: &[String],
    body: &str,
) -> Vec<u8> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut request = format!(
        "POST {path} {version}\r\nHost: {host}\r\nX-Kxp-Signature: {signature}\r\n\
         Content-Type: application/json\r\n"
    );
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    request.into_bytes()
}

/// A valid signature of `body` padded with one unknown item (`v0=xxx…`, which the grammar
/// ignores) to `len` bytes in all.
fn padded_signature(config: &Config, body: &str, len: usize) -> String {
    let mut header = signed(config, body.as_bytes());
    header.push_str(",v0=");
    let pad = len.saturating_sub(header.len());
    header.push_str(&"x".repeat(pad));
    assert_eq!(header.len(), len);
    header
}

/// The answer expected on the wire.
fn answer(status: u16, body: &str) -> RawAnswer {
    RawAnswer {
        status,
        body: body.to_owned(),
    }
}

/// `X-Kxp-Signature` may be at most 4096 bytes (ARCHITECTURE.md): one byte over, or 64 KiB
/// (well within what both server libraries accept in a head), is 401 `malformed_header` on
/// every receiver, decided by the signature grammar, even when the header's `v1` is right. A
/// header of exactly 4096 bytes is read.
pub async fn a_signature_header_over_4096_bytes_is_malformed<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    let mut answers = Vec::new();
    for (id, len) in [
        ("evt_h4096", 4096),
        ("evt_h4097", 4097),
        ("evt_h64k", 64 * 1024),
    ] {
        let body = event_body(id, 1, "eur");
        let header = padded_signature(&config, &body, len);
        let content_length = format!("Content-Length: {}", body.len());
        let request = raw_request(&url, "HTTP/1.1", &header, &[content_length], &body);
        answers.push(exchange(&url, request).await);
    }
    assert_eq!(
        answers,
        [
            answer(200, &outcome("processed")),
            answer(401, &error("malformed_header")),
            answer(401, &error("malformed_header")),
        ]
    );
    assert_eq!(effect_ids(&running.effects().await), ["evt_h4096"]);
    let logged: Vec<_> = requests(&running, 3).await.iter().map(fields).collect();
    assert_eq!(logged[1].1, "malformed_header", "{logged:?}");
    finish(running, database).await;
}

/// An HTTP/1.0 `POST` without `Content-Length` has no body anyone can frame (HTTP/1.0 has no
/// chunked encoding; RFC 1945 requires the length): 400 on every receiver, nothing processed.
/// actix-http answers it before any middleware runs (an empty body, no request line); hyper
/// would read the body as empty, so kxp-axum's layer refuses it, `length_required`, rather
/// than let the signature fail as `signature_mismatch` and send the sender to check its
/// secret. With its `Content-Length`, the same HTTP/1.0 request is processed.
pub async fn an_http_1_0_post_without_content_length_is_400<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();

    let body = event_body("evt_http10_unframed", 1, "eur");
    let request = raw_request(
        &url,
        "HTTP/1.0",
        &signed(&config, body.as_bytes()),
        &[],
        &body,
    );
    let got = exchange(&url, request).await;
    let (expected, logged) = match receiver.framework() {
        Framework::Axum => (answer(400, &error("length_required")), 1),
        Framework::Actix => (answer(400, ""), 0),
    };
    assert_eq!(got, expected, "{:?}", receiver.framework());

    let body = event_body("evt_http10", 1, "eur");
    let content_length = format!("Content-Length: {}", body.len());
    let request = raw_request(
        &url,
        "HTTP/1.0",
        &signed(&config, body.as_bytes()),
        &[content_length],
        &body,
    );
    let got = exchange(&url, request).await;
    assert_eq!(got, answer(200, &outcome("processed")));
    assert_eq!(effect_ids(&running.effects().await), ["evt_http10"]);

    let lines: Vec<_> = requests(&running, logged + 1)
        .await
        .iter()
        .map(fields)
        .collect();
    if logged == 1 {
        let unframed = (
            String::new(),
            "not_attempted".to_owned(),
            "rejected".to_owned(),
            400,
        );
        assert_eq!(lines[0], unframed);
    }
    finish(running, database).await;
}

/// What a framework's HTTP server library answers on its own, before any middleware runs,
/// pinned per framework (the table in `docs/receiving-webhooks.md`; when a library upgrade
/// changes one, update both): a request head past the library's size limit (actix-http's
/// is 128 KiB, hyper's 408 KiB: between the two, kxp-axum's layer reads the signature and
/// finds it malformed), `Content-Length` twice with the same value (hyper reads it as one,
/// actix-http refuses it), two different values (both refuse), and `Content-Length` beside
/// `Transfer-Encoding: chunked` (hyper frames by the chunks, as RFC 9112 §6.3 says; actix-http
/// refuses it, which the RFC allows). Chunked alone is processed by both. A request the library
/// refused reached no middleware, so it has no request log line.
pub async fn the_server_library_decides_some_framing_alone<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    let signed_request = |body: &str, headers: &[String], wire_body: &str| {
        raw_request(
            &url,
            "HTTP/1.1",
            &signed(&config, body.as_bytes()),
            headers,
            wire_body,
        )
    };
    let content_length = |body: &str| format!("Content-Length: {}", body.len());
    let chunked = |body: &str| format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let te_chunked = "Transfer-Encoding: chunked".to_owned();
    let mut got = Vec::new();

    for (id, len) in [("evt_head_200k", 200 * 1024), ("evt_head_500k", 500 * 1024)] {
        let body = event_body(id, 1, "eur");
        let header = padded_signature(&config, &body, len);
        let request = raw_request(&url, "HTTP/1.1", &header, &[content_length(&body)], &body);
        got.push((id, exchange(&url, request).await));
    }
    let body = event_body("evt_length_twice", 1, "eur");
    let request = signed_request(
        &body,
        &[content_length(&body), content_length(&body)],
        &body,
    );
    got.push(("evt_length_twice", exchange(&url, request).await));
    let body = event_body("evt_lengths_differ", 1, "eur");
    let shorter = format!("Content-Length: {}", body.len() - 1);
    let request = signed_request(&body, &[content_length(&body), shorter], &body);
    got.push(("evt_lengths_differ", exchange(&url, request).await));
    let body = event_body("evt_length_and_chunked", 1, "eur");
    let headers = [content_length(&body), te_chunked.clone()];
    let request = signed_request(&body, &headers, &chunked(&body));
    got.push(("evt_length_and_chunked", exchange(&url, request).await));
    let body = event_body("evt_chunked", 1, "eur");
    let request = signed_request(&body, &[te_chunked], &chunked(&body));
    got.push(("evt_chunked", exchange(&url, request).await));

    let processed = || answer(200, &outcome("processed"));
    let refused = |status| answer(status, "");
    let expected = match receiver.framework() {
        Framework::Axum => [
            ("evt_head_200k", answer(401, &error("malformed_header"))),
            ("evt_head_500k", refused(431)),
            ("evt_length_twice", processed()),
            ("evt_lengths_differ", refused(400)),
            ("evt_length_and_chunked", processed()),
            ("evt_chunked", processed()),
        ],
        Framework::Actix => [
            ("evt_head_200k", refused(431)),
            ("evt_head_500k", refused(431)),
            ("evt_length_twice", refused(400)),
            ("evt_lengths_differ", refused(400)),
            ("evt_length_and_chunked", refused(400)),
            ("evt_chunked", processed()),
        ],
    };
    assert_eq!(got, expected, "{:?}", receiver.framework());
    let reached: Vec<&str> = expected
        .iter()
        .filter(|(_, answer)| !answer.body.is_empty())
        .map(|(id, _)| *id)
        .collect();
    let processed: Vec<&str> = expected
        .iter()
        .filter(|(_, answer)| answer.status == 200)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(effect_ids(&running.effects().await), processed);
    requests(&running, reached.len()).await;
    finish(running, database).await;
}
