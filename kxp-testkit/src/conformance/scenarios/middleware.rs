//! The scenarios about the middleware: vectors, limits, envelopes, the challenge, rotation,
//! the log line. They run on a SQLite store.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::super::client::{client, deliver, error, outcome, post, send};
use super::super::{
    Config, ReceiverUnderTest, RunningReceiver, SECRET, event_body, key_id, now, sign,
};
use super::*;
use crate::{check_all, vectors};

// --- The middleware --------------------------------------------------------------------------

/// Every shared and extra vector that HTTP can carry, sent as is: the status (401 with the
/// kind, or 200/400 for authentic bodies) and the request line's `verification` must both give
/// the vector's verdict, and no secret may reach the logs. One receiver per configuration
/// (secrets, clock, tolerance) of the vectors.
pub async fn every_vector_over_http<R: ReceiverUnderTest>(receiver: &R) {
    let mut skipped = Vec::new();
    let mut verdicts = HashMap::new();
    let mut groups: Vec<(Config, Vec<crate::Vector>)> = Vec::new();
    for vector in vectors() {
        if !vector.fits_http() {
            // HTTP cannot carry control characters, and strips whitespace at the ends of a
            // value. The library tests cover these vectors.
            skipped.push(vector.name.clone());
            verdicts.insert(vector.name.clone(), vector.expect.clone());
            continue;
        }
        let tolerance = Some(Duration::from_secs(vector.tolerance_s));
        let group = groups.iter_mut().find(|(config, _)| {
            config.secrets == vector.secrets
                && config.now == Some(vector.now)
                && config.tolerance == tolerance
        });
        match group {
            Some((_, members)) => members.push(vector),
            None => {
                let config = Config {
                    secrets: vector.secrets.clone(),
                    now: Some(vector.now),
                    tolerance,
                    body_limit: DEFAULT_BODY_LIMIT,
                    ..Config::new("")
                };
                groups.push((config, vec![vector]));
            }
        }
    }

    let mut all_logs = Vec::new();
    for (config, members) in groups {
        let database = sqlite().await;
        let config = Config {
            database_url: database.url().to_owned(),
            ..config
        };
        let running = receiver.start(config).await;
        for (i, vector) in members.iter().enumerate() {
            let header = (!vector.header.is_empty()).then_some(vector.header.as_str());
            let answer = post(&running.url(), header, vector.body.clone()).await;
            let verdict = match answer.status {
                401 => serde_json::from_str::<Value>(&answer.body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| panic!("{}: 401 {}", vector.name, answer.body)),
                // Authentic; the binary and empty bodies then fail the envelope check.
                200 | 400 => "ok".to_owned(),
                other => panic!("{}: status {other} {}", vector.name, answer.body),
            };
            let lines = requests(&running, i + 1).await;
            assert_eq!(
                lines[i]["verification"].as_str(),
                Some(verdict.as_str()),
                "{}: the log line disagrees with the response",
                vector.name
            );
            verdicts.insert(vector.name.clone(), verdict);
        }
        all_logs.extend(running.log_lines(0).await);
        finish(running, database).await;
    }
    check_all(|v| verdicts[&v.name].clone());
    assert_eq!(
        skipped,
        [
            "malformed_nul_byte",
            "extra_delete_character",
            "extra_newline",
            "extra_whitespace_only"
        ]
    );
    let all_logs = all_logs.join("\n");
    for secret in vectors().iter().flat_map(|v| v.secrets.clone()) {
        assert!(!all_logs.contains(&secret), "a secret reached the logs");
    }
}

/// An empty `X-Kxp-Signature` and none at all are both `missing_header`: 401 with a JSON body.
pub async fn an_empty_or_absent_header_is_a_missing_header<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let running = receiver.start(Config::new(database.url())).await;
    for header in [Some(""), None] {
        let answer = post(&running.url(), header, event_body("evt_e1", 1, "eur")).await;
        assert_eq!(
            answer.pair(),
            (401, error("missing_header").as_str()),
            "{header:?}"
        );
        assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    }
    assert!(running.effects().await.is_empty());
    finish(running, database).await;
}

/// A body over the limit is 413, whether its `Content-Length` says so up front or the bytes are
/// counted as they stream in; a body exactly at the limit is read (then refused as not JSON).
/// The handler never runs, and the 413s are logged `not_attempted`.
pub async fn bodies_over_the_limit_are_refused_unread<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let config = Config::new(database.url());
    let limit = config.body_limit;
    let running = receiver.start(config.clone()).await;
    let url = running.url();

    let big = vec![b'x'; limit + 1000];
    let answer = post(&url, Some(&signed(&config, &big)), big.clone()).await;
    assert_eq!(answer.pair(), (413, error("payload_too_large").as_str()));

    // Without a Content-Length the bytes are counted as they stream in.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        big.chunks(100).map(|c| Ok(c.to_vec())).collect();
    let stream = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let answer = post(&url, Some(&signed(&config, &big)), stream).await;
    assert_eq!(answer.pair(), (413, error("payload_too_large").as_str()));

    // Exactly at the limit is fine (then refused as not JSON, which proves it was read).
    let exact = vec![b'x'; limit];
    let answer = post(&url, Some(&signed(&config, &exact)), exact.clone()).await;
    assert_eq!(answer.pair(), (400, error("invalid_json").as_str()));
    assert!(running.effects().await.is_empty());

    let logged: Vec<(String, u64)> = requests(&running, 3)
        .await
        .iter()
        .map(|l| {
            let (_, verification, _, status) = fields(l);
            (verification, status)
        })
        .collect();
    assert_eq!(
        logged,
        [
            ("not_attempted".to_owned(), 413),
            ("not_attempted".to_owned(), 413),
            ("ok".to_owned(), 400)
        ]
    );
    finish(running, database).await;
}

/// A client that announces 1000 bytes, sends 10 and goes away gets one log line:
/// `not_attempted`, `rejected`, 400.
pub async fn a_body_cut_short_is_logged_as_unreadable<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let running = receiver.start(Config::new(database.url())).await;
    let url = running.url();
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http:// URL: {url}"));
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    let request =
        format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789");
    stream
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("cannot write the request: {e}"));
    let _ = stream.shutdown().await;
    drop(stream);

    let lines = requests(&running, 1).await;
    assert_eq!(
        fields(&lines[0]),
        (
            String::new(),
            "not_attempted".to_owned(),
            "rejected".to_owned(),
            400
        )
    );
    assert!(running.effects().await.is_empty());
    finish(running, database).await;
}

/// Authentic bodies that are not JSON, or not an event (no `id`, an empty one, not an object),
/// are 400 with the envelope error, and the handler never runs.
pub async fn authentic_bodies_that_are_not_events_are_400<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    for (body, code) in [
        ("not json", "invalid_json"),
        (
            r#"{"type":"payment.succeeded","api_version":"v","created_at":"c","data":{}}"#,
            "invalid_envelope",
        ),
        (
            r#"{"id":"","type":"t","api_version":"v","created_at":"c","data":{}}"#,
            "invalid_envelope",
        ),
        ("[1,2,3]", "invalid_envelope"),
    ] {
        let answer = post(
            &running.url(),
            Some(&signed(&config, body.as_bytes())),
            body,
        )
        .await;
        assert_eq!(answer.pair(), (400, error(code).as_str()), "{body}");
        assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    }
    assert!(running.effects().await.is_empty());
    finish(running, database).await;
}

/// Odd spacing and key order survive (the signature covers these exact bytes), and the handler
/// reads the event's typed `data`.
pub async fn the_handler_gets_the_exact_bytes_and_the_typed_event<R: ReceiverUnderTest>(
    receiver: &R,
) {
    let database = sqlite().await;
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let body = r#"{ "data":{"currency":"eur", "amount":1999},"id":"evt_raw","type":"payment.succeeded","api_version":"v","created_at":"c" }"#;
    let answer = deliver(&running.url(), &config, body).await;
    assert_eq!(answer.pair(), (200, outcome("processed").as_str()));
    assert_eq!(running.effects().await, [effect("evt_raw", 1999, "eur")]);
    finish(running, database).await;
}

/// A 600 KiB event under a 1 MiB limit reaches the handler whole: no framework limit of its
/// own (actix-web's is 256 KiB) stands in the way.
pub async fn a_large_event_within_the_limit_reaches_the_handler_whole<R: ReceiverUnderTest>(
    receiver: &R,
) {
    let database = sqlite().await;
    let config = Config {
        body_limit: DEFAULT_BODY_LIMIT,
        ..Config::new(database.url())
    };
    let running = receiver.start(config.clone()).await;
    let padding = "x".repeat(600 * 1024);
    let body = format!(
        r#"{{"id":"evt_big","type":"payment.succeeded","api_version":"v","created_at":"c","data":{{"amount":7,"currency":"eur","note":"{padding}"}}}}"#
    );
    let answer = deliver(&running.url(), &config, &body).await;
    assert_eq!(answer.pair(), (200, outcome("processed").as_str()));
    assert_eq!(running.effects().await, [effect("evt_big", 7, "eur")]);
    finish(running, database).await;
}

/// `GET ?challenge=<token>` echoes a URL-safe token as `text/plain` (with `nosniff`), refuses
/// anything else with 400, and any other GET must be signed; each request logs its line.
pub async fn the_challenge_echoes_a_safe_token_only<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let running = receiver.start(Config::new(database.url())).await;
    let url = running.url();

    let answer = send(client().get(format!("{url}?challenge=ch_4f9a-Zx_01"))).await;
    assert_eq!(answer.pair(), (200, "ch_4f9a-Zx_01"));
    assert_eq!(
        answer.content_type.as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(answer.nosniff.as_deref(), Some("nosniff"));

    let answer = send(client().get(format!("{url}?challenge=%3Cscript%3E"))).await;
    assert_eq!(answer.pair(), (400, error("invalid_challenge").as_str()));

    // Any other request to the webhook must be signed, GET or not.
    let answer = send(client().get(&url)).await;
    assert_eq!(answer.pair(), (401, error("missing_header").as_str()));

    let logged: Vec<_> = requests(&running, 3).await.iter().map(fields).collect();
    let line = |verification: &str, outcome: &str, status| {
        (
            String::new(),
            verification.to_owned(),
            outcome.to_owned(),
            status,
        )
    };
    assert_eq!(
        logged,
        [
            line("not_attempted", "challenge", 200),
            line("not_attempted", "rejected", 400),
            line("missing_header", "rejected", 401),
        ]
    );
    finish(running, database).await;
}

/// The middleware guards the webhook route only: another path answers 404 to a challenge (a
/// URL that is not a webhook route must not pass the sender's challenge) and to an unsigned
/// `POST`, not 401, and is not logged as a webhook request.
pub async fn only_the_webhook_route_is_verified<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let running = receiver.start(Config::new(database.url())).await;
    let url = running.url();
    let other = match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/not-the-webhook"),
        None => panic!("the webhook URL {url} has no path"),
    };

    let answer = send(client().get(format!("{other}?challenge=ch_4f9a-Zx_01"))).await;
    assert_eq!(answer.status, 404, "a challenge elsewhere: {}", answer.body);
    assert!(!answer.body.contains("ch_4f9a-Zx_01"), "{}", answer.body);
    let answer = send(client().post(&other).body("{}")).await;
    assert_eq!(
        answer.status, 404,
        "an unsigned POST elsewhere: {}",
        answer.body
    );

    // The webhook route still answers both: the challenge, and 401 unsigned.
    let answer = send(client().get(format!("{url}?challenge=ch_4f9a-Zx_01"))).await;
    assert_eq!(answer.pair(), (200, "ch_4f9a-Zx_01"));
    let answer = send(client().post(&url).body("{}")).await;
    assert_eq!(answer.pair(), (401, error("missing_header").as_str()));

    let logged: Vec<_> = requests(&running, 2).await.iter().map(fields).collect();
    assert_eq!(
        logged.len(),
        2,
        "only the webhook route's requests: {logged:?}"
    );
    finish(running, database).await;
}

/// Configured with `new,old`, the receiver accepts either secret, and what a rotating sender
/// emits (one `v1` per live secret, newest first); a retired secret is `signature_mismatch`.
/// Each 200 names the secret that verified it in `X-Kxp-Verified-Key`; the 401 names none.
pub async fn rotation_accepts_either_secret_during_the_overlap<R: ReceiverUnderTest>(receiver: &R) {
    let database = sqlite().await;
    let config = Config {
        secrets: vec!["new-secret".to_owned(), "old-secret".to_owned()],
        ..Config::new(database.url())
    };
    let running = receiver.start(config.clone()).await;
    let body = event_body("evt_rot", 1, "eur");
    let t = now(&config);
    // Each 2xx names the receiver's secret that verified it (`X-Kxp-Verified-Key`), so the
    // sender can tell when the new one is in use: of a header signed with several, the first
    // one the receiver holds.
    for (secrets, verified_by) in [
        (&["new-secret"][..], "new-secret"),
        (&["old-secret"], "old-secret"),
        (&["newer-secret", "new-secret"], "new-secret"),
        (&["new-secret", "old-secret"], "new-secret"),
    ] {
        let header = sign(secrets, t, body.as_bytes());
        let answer = post(&running.url(), Some(&header), body.clone()).await;
        assert_eq!(
            answer.status, 200,
            "signed with {secrets:?}: {}",
            answer.body
        );
        assert_eq!(
            answer.verified_key,
            Some(key_id(verified_by)),
            "signed with {secrets:?}: X-Kxp-Verified-Key must name {verified_by:?}"
        );
    }
    // A refusal names no key.
    let header = sign(&["retired-secret"], t, body.as_bytes());
    let answer = post(&running.url(), Some(&header), body).await;
    assert_eq!(answer.pair(), (401, error("signature_mismatch").as_str()));
    assert_eq!(answer.verified_key, None, "a 401 has no X-Kxp-Verified-Key");
    finish(running, database).await;
}

/// One line per request with `event_id` (from the verified body only), `verification`,
/// `outcome`, `status` and `duration_ms` at the top level; every line is a JSON object; no
/// secret, signature or body ever appears.
pub async fn one_log_line_per_request_with_the_contract_fields_and_no_secrets<
    R: ReceiverUnderTest,
>(
    receiver: &R,
) {
    let database = sqlite().await;
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    // The amount marks the body: it must not reach the logs.
    let body = event_body("evt_log", 918_273_645, "eur");
    let header = signed(&config, body.as_bytes());

    send(client().get(format!("{url}?challenge=token1"))).await;
    post(&url, Some(&header), body.clone()).await;
    post(&url, Some(&header), body.clone()).await;
    let forged = sign(&["not-the-secret"], now(&config), body.as_bytes());
    post(&url, Some(&forged), body.clone()).await;
    let big = vec![b'x'; config.body_limit + 1];
    post(&url, Some(&signed(&config, &big)), big).await;
    let stale = sign(&[SECRET], now(&config) - 301, body.as_bytes());
    post(&url, Some(&stale), body.clone()).await;
    post(&url, Some(&signed(&config, b"not json")), "not json").await;

    let lines = requests(&running, 7).await;
    let line = |event_id: &str, verification: &str, outcome: &str, status| {
        (
            event_id.to_owned(),
            verification.to_owned(),
            outcome.to_owned(),
            status,
        )
    };
    assert_eq!(
        lines.iter().map(fields).collect::<Vec<_>>(),
        [
            line("", "not_attempted", "challenge", 200),
            line("evt_log", "ok", "processed", 200),
            line("evt_log", "ok", "duplicate", 200),
            line("", "signature_mismatch", "rejected", 401),
            line("", "not_attempted", "rejected", 413),
            line("", "timestamp_too_old", "rejected", 401),
            line("", "ok", "rejected", 400),
        ]
    );
    assert!(lines.iter().all(|l| l["duration_ms"].is_u64()), "{lines:?}");

    let text = running.log_lines(7).await.join("\n");
    assert!(!text.contains(SECRET), "the secret reached the logs");
    for signature in [&header, &forged, &stale] {
        let v1 = signature.rsplit("v1=").next().unwrap_or_default();
        assert!(!text.contains(v1), "a signature reached the logs");
    }
    assert!(!text.contains("918273645"), "the body reached the logs");
    finish(running, database).await;
}
