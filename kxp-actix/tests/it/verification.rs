//! What the middleware answers before any handler runs: vectors, limits, envelopes, the
//! challenge, rotation, and the log line.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::web;
use bytes::Bytes;
use kxp_actix::{Receiver, VerifiedBody, VerifiedEvent};
use kxp_testkit::{check_all, vectors};
use kxp_verify::{Secret, Verifier};

use crate::harness::{
    NOW, SECRET, client, event_body, post as send, receiver, serve, serve_routes, sign,
};

fn counting_routes(calls: Arc<AtomicUsize>) -> impl Fn(&mut web::ServiceConfig) + Send + Clone {
    move |cfg: &mut web::ServiceConfig| {
        let calls = calls.clone();
        cfg.route(
            "/webhooks",
            web::post().to(move |_: VerifiedBody| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { "handled" }
            }),
        );
    }
}

#[actix_web::test]
async fn every_vector_over_http() {
    let mut skipped = Vec::new();
    let mut verdicts = std::collections::HashMap::new();
    let mut all_logs = String::new();
    for vector in vectors() {
        if !vector.fits_http() {
            // HTTP cannot carry control characters, and strips whitespace at the ends of a
            // value. The library tests cover these vectors.
            skipped.push(vector.name.clone());
            verdicts.insert(vector.name.clone(), vector.expect.clone());
            continue;
        }
        let secrets = vector.secrets.iter().map(|s| Secret::new(s).unwrap());
        let verifier = Verifier::with_secrets(secrets).unwrap();
        let now = vector.now;
        let receiver = Receiver::new(verifier)
            .tolerance(Duration::from_secs(vector.tolerance_s))
            .clock(move || now);
        let server = serve(counting_routes(Arc::default()), receiver).await;
        let header = (!vector.header.is_empty()).then_some(vector.header.as_str());
        let (status, body) = send(&server.url, header, vector.body.clone()).await;
        let verdict = match status {
            401 => serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"]
                .as_str()
                .unwrap()
                .to_owned(),
            // Authentic; the binary and empty bodies then fail the envelope check.
            200 | 400 => "ok".to_owned(),
            other => panic!("{}: status {other} {body}", vector.name),
        };
        let lines = server.logs.requests();
        assert_eq!(lines.len(), 1, "{}: {}", vector.name, server.logs.text());
        assert_eq!(
            lines[0]["verification"].as_str().unwrap(),
            verdict,
            "{}: log line disagrees with the response",
            vector.name
        );
        verdicts.insert(vector.name.clone(), verdict);
        all_logs.push_str(&server.logs.text());
        server.stop().await;
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
    for secret in vectors().iter().flat_map(|v| v.secrets.clone()) {
        assert!(!all_logs.contains(&secret), "a secret reached the logs");
    }
}

#[actix_web::test]
async fn an_empty_header_value_is_a_missing_header() {
    let server = serve(counting_routes(Arc::default()), receiver()).await;
    let (status, body) = send(&server.url, Some(""), event_body("e1")).await;
    assert_eq!(
        (status, body.as_str()),
        (401, r#"{"error":"missing_header"}"#)
    );
}

#[actix_web::test]
async fn rejections_are_json() {
    let server = serve(counting_routes(Arc::default()), receiver()).await;
    let response = client()
        .post(format!("{}/webhooks", server.url))
        .body(event_body("e1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"error":"missing_header"}"#
    );
}

#[actix_web::test]
async fn bodies_over_the_limit_are_refused_unread() {
    let calls = Arc::new(AtomicUsize::new(0));
    let server = serve(counting_routes(calls.clone()), receiver().body_limit(1024)).await;
    let url = &server.url;

    let big = vec![b'x'; 2000];
    let (status, body) = send(url, Some(&sign(SECRET, &big)), big.clone()).await;
    assert_eq!(
        (status, body.as_str()),
        (413, r#"{"error":"payload_too_large"}"#)
    );

    // Without a Content-Length the bytes are counted as they stream in.
    let chunks: Vec<Result<Bytes, std::io::Error>> = big
        .chunks(100)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let stream = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let (status, body) = send(url, Some(&sign(SECRET, &big)), stream).await;
    assert_eq!(
        (status, body.as_str()),
        (413, r#"{"error":"payload_too_large"}"#)
    );

    // Exactly at the limit is fine (then refused as not JSON, which proves it was read).
    let exact = vec![b'x'; 1024];
    let (status, body) = send(url, Some(&sign(SECRET, &exact)), exact.clone()).await;
    assert_eq!(
        (status, body.as_str()),
        (400, r#"{"error":"invalid_json"}"#)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let statuses: Vec<u64> = server
        .logs
        .requests()
        .iter()
        .map(|l| l["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [413, 413, 400]);
}

#[actix_web::test]
async fn a_large_event_within_the_limit_reaches_the_handler_whole() {
    // Above actix-web's own 256 KiB default for `web::Bytes`: `VerifiedBody` has no limit but
    // the middleware's.
    let routes = |cfg: &mut web::ServiceConfig| {
        cfg.route(
            "/webhooks",
            web::post().to(|raw: VerifiedBody| async move { raw.bytes().len().to_string() }),
        );
    };
    let server = serve(routes, receiver()).await;
    let padding = "x".repeat(600 * 1024);
    let body = format!(
        r#"{{"id":"evt_big","type":"t","api_version":"v","created_at":"c","data":{{"note":"{padding}"}}}}"#
    );
    let (status, answer) = send(
        &server.url,
        Some(&sign(SECRET, body.as_bytes())),
        body.clone(),
    )
    .await;
    assert_eq!((status, answer), (200, body.len().to_string()));
}

#[actix_web::test]
async fn a_body_cut_short_is_logged_as_unreadable() {
    use tokio::io::AsyncWriteExt;

    let server = serve(counting_routes(Arc::default()), receiver()).await;
    let addr = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // 1000 bytes announced, 10 sent, then the client goes away.
    stream
        .write_all(b"POST /webhooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    drop(stream);

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.logs.requests().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lines = server.logs.requests();
    assert_eq!(lines.len(), 1, "{}", server.logs.text());
    assert_eq!(lines[0]["verification"], "not_attempted");
    assert_eq!(lines[0]["outcome"], "rejected");
    assert_eq!(lines[0]["status"], 400);
}

#[actix_web::test]
async fn authentic_bodies_that_are_not_events_are_400() {
    let calls = Arc::new(AtomicUsize::new(0));
    let server = serve(counting_routes(calls.clone()), receiver()).await;
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
        let (status, answer) = send(&server.url, Some(&sign(SECRET, body.as_bytes())), body).await;
        assert_eq!(
            (status, answer),
            (400, format!(r#"{{"error":"{code}"}}"#)),
            "{body}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[actix_web::test]
async fn the_handler_gets_the_raw_bytes_and_the_typed_event() {
    #[derive(serde::Deserialize)]
    struct Payment {
        amount: u64,
    }
    async fn handler(raw: VerifiedBody, event: VerifiedEvent<Payment>, body: web::Bytes) -> String {
        assert_eq!(raw.bytes(), &body, "the body reaches the handler unchanged");
        assert_eq!(raw.event_id(), event.id());
        format!("{} {}", event.id(), event.data().amount)
    }
    let routes = |cfg: &mut web::ServiceConfig| {
        cfg.route("/webhooks", web::post().to(handler));
    };
    let server = serve(routes, receiver()).await;
    // Odd spacing and key order survive: the signature covers these exact bytes.
    let body = r#"{ "data":{"amount":1999},"id":"evt_raw","type":"payment.succeeded","api_version":"v","created_at":"c" }"#;
    let (status, answer) = send(&server.url, Some(&sign(SECRET, body.as_bytes())), body).await;
    assert_eq!((status, answer.as_str()), (200, "evt_raw 1999"));
}

#[actix_web::test]
async fn the_middleware_can_wrap_one_resource_only() {
    let verify = kxp_actix::VerifyMiddleware::new(receiver());
    let routes =
        move |cfg: &mut web::ServiceConfig| {
            cfg.service(web::resource("/webhooks").wrap(verify.clone()).route(
                web::post().to(|event: VerifiedEvent| async move { event.id().to_owned() }),
            ))
            .route("/health", web::get().to(|| async { "up" }));
        };
    let server = serve_routes(routes).await;
    let body = event_body("evt_res");
    let (status, answer) = send(&server.url, Some(&sign(SECRET, body.as_bytes())), body).await;
    assert_eq!((status, answer.as_str()), (200, "evt_res"));
    let (status, _) = send(&server.url, None, event_body("evt_res")).await;
    assert_eq!(status, 401);
    // Routes outside the wrapped resource are not the middleware's business.
    let health = client()
        .get(format!("{}/health", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(server.logs.requests().len(), 2);
}

#[actix_web::test]
async fn a_handler_without_the_middleware_refuses_rather_than_trusts() {
    let routes = |cfg: &mut web::ServiceConfig| {
        cfg.route(
            "/webhooks",
            web::post().to(|event: VerifiedEvent| async move { event.id().to_owned() }),
        );
    };
    let server = serve_routes(routes).await;
    let body = event_body("e1");
    let (status, answer) = send(&server.url, Some(&sign(SECRET, body.as_bytes())), body).await;
    assert_eq!(
        (status, answer.as_str()),
        (500, r#"{"error":"not_verified"}"#)
    );
}

#[actix_web::test]
async fn an_error_from_the_wrapped_service_is_logged_once_with_its_status() {
    // A service that fails with `Err` instead of answering: actix-web turns the error into the
    // response after the middleware has seen it.
    let routes = |cfg: &mut web::ServiceConfig| {
        cfg.default_service(actix_web::dev::fn_service(
            |_: actix_web::dev::ServiceRequest| async {
                Err::<actix_web::dev::ServiceResponse, _>(
                    actix_web::error::ErrorServiceUnavailable("maintenance"),
                )
            },
        ));
    };
    let server = serve(routes, receiver()).await;
    let body = event_body("evt_err");
    let (status, _) = send(&server.url, Some(&sign(SECRET, body.as_bytes())), body).await;
    assert_eq!(status, 503);
    let lines = server.logs.requests();
    assert_eq!(lines.len(), 1, "{}", server.logs.text());
    assert_eq!(lines[0]["event_id"], "evt_err");
    assert_eq!(lines[0]["verification"], "ok");
    assert_eq!(lines[0]["outcome"], "failed");
    assert_eq!(lines[0]["status"], 503);
}

#[actix_web::test]
async fn the_challenge_echoes_a_safe_token_only() {
    let server = serve(counting_routes(Arc::default()), receiver()).await;
    let url = &server.url;
    let client = client();

    let response = client
        .get(format!("{url}/webhooks?challenge=a1B2-c3_d4"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    assert_eq!(response.text().await.unwrap(), "a1B2-c3_d4");

    let response = client
        .get(format!("{url}/webhooks?challenge=%3Cscript%3E"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"error":"invalid_challenge"}"#
    );

    // Any other request behind the middleware must be signed, GET or not.
    let response = client.get(format!("{url}/webhooks")).send().await.unwrap();
    assert_eq!(response.status(), 401);

    let lines = server.logs.requests();
    assert_eq!(lines.len(), 3, "{}", server.logs.text());
    assert_eq!(lines[0]["verification"], "not_attempted");
    assert_eq!(lines[0]["outcome"], "challenge");
    assert_eq!(lines[1]["status"], 400);
    assert_eq!(lines[2]["verification"], "missing_header");
}

#[actix_web::test]
async fn rotation_accepts_either_secret_during_the_overlap() {
    let server = serve(
        counting_routes(Arc::default()),
        Receiver::new(Verifier::from_secret_list("new-secret,old-secret").unwrap()).clock(|| NOW),
    )
    .await;
    let url = &server.url;
    let body = event_body("evt_rot");
    for secret in ["new-secret", "old-secret"] {
        let (status, _) = send(url, Some(&sign(secret, body.as_bytes())), body.clone()).await;
        assert_eq!(status, 200, "signed with {secret}");
    }
    // What a rotating sender emits: one v1 per live secret, newest first.
    let both = kxp_verify::Signer::from_secret_list("newer-secret,new-secret")
        .unwrap()
        .sign(NOW, body.as_bytes())
        .to_string();
    assert_eq!(send(url, Some(&both), body.clone()).await.0, 200);
    let (status, answer) = send(url, Some(&sign("retired-secret", body.as_bytes())), body).await;
    assert_eq!(
        (status, answer.as_str()),
        (401, r#"{"error":"signature_mismatch"}"#)
    );
}

#[actix_web::test]
async fn one_log_line_per_request_with_the_contract_fields_and_no_secrets() {
    let server = serve(counting_routes(Arc::default()), receiver().body_limit(4096)).await;
    let url = &server.url;
    let body = event_body("evt_log");
    let header = sign(SECRET, body.as_bytes());
    send(url, Some(&header), body.clone()).await;
    send(url, Some(&sign("wrong", body.as_bytes())), body.clone()).await;
    send(url, Some(&header), vec![b'x'; 5000]).await;
    let stale = kxp_verify::Signer::from_secret_list(SECRET)
        .unwrap()
        .sign(NOW - 301, body.as_bytes())
        .to_string();
    send(url, Some(&stale), body.clone()).await;

    let logs = &server.logs;
    let lines = logs.requests();
    assert_eq!(lines.len(), 4, "{}", logs.text());
    let fields = |i: usize| {
        let l = &lines[i];
        (
            l["event_id"].as_str().unwrap().to_owned(),
            l["verification"].as_str().unwrap().to_owned(),
            l["outcome"].as_str().unwrap().to_owned(),
            l["status"].as_u64().unwrap(),
        )
    };
    assert_eq!(
        fields(0),
        ("evt_log".into(), "ok".into(), "processed".into(), 200)
    );
    assert_eq!(
        fields(1),
        (
            "".into(),
            "signature_mismatch".into(),
            "rejected".into(),
            401
        )
    );
    assert_eq!(
        fields(2),
        ("".into(), "not_attempted".into(), "rejected".into(), 413)
    );
    assert_eq!(
        fields(3),
        (
            "".into(),
            "timestamp_too_old".into(),
            "rejected".into(),
            401
        )
    );
    assert!(lines.iter().all(|l| l["duration_ms"].is_u64()));

    let text = logs.text();
    assert!(!text.contains(SECRET));
    let v1 = header.rsplit("v1=").next().unwrap();
    assert!(!text.contains(v1), "a signature reached the logs");
    assert!(!text.contains("1999"), "the body reached the logs");
}
