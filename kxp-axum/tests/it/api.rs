//! What only this adapter's API can get wrong (everything a receiver answers is in the
//! conformance suite).

use axum::Router;
use axum::routing::post;
use kxp_axum::VerifiedEvent;
use kxp_testkit::conformance::{SECRET, event_body, sign};

#[tokio::test]
async fn a_handler_without_the_layer_refuses_rather_than_trusts() {
    let app = Router::new().route(
        "/webhooks",
        post(|event: VerifiedEvent| async move { event.id().to_owned() }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let body = event_body("e1", 1, "eur");
    let response = reqwest::Client::new()
        .post(url)
        .header("X-Kxp-Signature", sign(&[SECRET], 1, body.as_bytes()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    assert_eq!(
        response.text().await.unwrap(),
        r#"{"error":"not_verified"}"#
    );
}

/// A 2xx names the secret that verified the request, here the second of two (a sender still on
/// the old secret during a rotation); no other answer names any.
#[tokio::test]
async fn a_verified_2xx_names_the_secret_that_verified_it_and_nothing_else_does() {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use kxp_axum::{Receiver, VerifyLayer};
    use kxp_verify::{Secret, Verifier};

    const NOW: u64 = 1_764_464_523;
    // SHA-256("kxp-key-id\0" + SECRET), first 8 bytes: computed with Python's hashlib.
    const SECRET_FINGERPRINT: &str = "af17edef1cfa9c63";
    let secrets = ["new-secret", SECRET].map(|s| Secret::new(s).unwrap());
    let receiver = Receiver::new(Verifier::with_secrets(secrets).unwrap()).clock(|| NOW);
    let handler = |event: VerifiedEvent| async move {
        if event.id() == "evt_fail" {
            // A handler's own header is taken off a non-2xx too.
            let key = [("x-kxp-verified-key", "0000000000000000")];
            (StatusCode::INTERNAL_SERVER_ERROR, key, "failed").into_response()
        } else {
            (StatusCode::OK, "ok").into_response()
        }
    };
    let app = Router::new().route(
        "/webhooks",
        post(handler)
            .get(|| async { "not a challenge" })
            .layer(VerifyLayer::new(receiver)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let send = |secrets: &'static [&'static str], body: String| {
        let request = client
            .post(&url)
            .header("X-Kxp-Signature", sign(secrets, NOW, body.as_bytes()))
            .body(body);
        async move {
            let response = request.send().await.unwrap();
            let key = response
                .headers()
                .get("x-kxp-verified-key")
                .map(|v| v.to_str().unwrap().to_owned());
            (response.status().as_u16(), key)
        }
    };
    let accepted = send(&[SECRET], event_body("evt_1", 1, "eur")).await;
    assert_eq!(accepted, (200, Some(SECRET_FINGERPRINT.to_owned())));
    // Signed with both, newest first: the first signature is the new secret's.
    let both = send(&["new-secret", SECRET], event_body("evt_2", 1, "eur")).await;
    let new = kxp_verify::key_fingerprint(b"new-secret").to_string();
    assert_eq!(both, (200, Some(new)));

    assert_eq!(
        send(&["retired"], event_body("evt_3", 1, "eur")).await,
        (401, None)
    );
    assert_eq!(send(&[SECRET], "not json".to_owned()).await, (400, None));
    assert_eq!(
        send(&[SECRET], event_body("evt_fail", 1, "eur")).await,
        (500, None)
    );
    let challenge = client
        .get(format!("{url}?challenge=tok"))
        .send()
        .await
        .unwrap();
    assert_eq!(challenge.status(), 200);
    assert!(challenge.headers().get("x-kxp-verified-key").is_none());
}

#[tokio::test]
async fn a_layer_in_the_standard_webhooks_format_verifies_its_headers() {
    use kxp_axum::{Format, Receiver, VerifyLayer};
    use kxp_testkit::conformance::standard_webhooks;
    use kxp_verify::{Secret, Verifier};

    let secret = Secret::from_whsec(&standard_webhooks::whsec()).unwrap();
    let receiver = Receiver::new(Verifier::new(secret)).format(Format::StandardWebhooks);
    let app = Router::new().route(
        "/webhooks",
        post(|event: VerifiedEvent| async move { event.id().to_owned() })
            .layer(VerifyLayer::new(receiver)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    standard_webhooks::check_receiver(&url).await;
}

/// `kxp_axum::serve` gives each request its connection's remote address, as `axum::serve` does
/// with `into_make_service_with_connect_info`: a handler can count clients (the sender's
/// console limits failed sign-ins by it).
#[tokio::test]
async fn serve_gives_each_request_its_connections_remote_address() {
    use std::net::SocketAddr;

    use axum::extract::ConnectInfo;
    use axum::routing::get;
    use kxp_axum::ServeLimits;

    let app = Router::new().route(
        "/peer",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    tokio::spawn(kxp_axum::serve(
        listener,
        app,
        ServeLimits::default(),
        std::future::pending(),
    ));
    let response = reqwest::get(format!("http://{server}/peer")).await.unwrap();
    assert_eq!(response.status(), 200);
    let peer: SocketAddr = response.text().await.unwrap().parse().unwrap();
    assert_eq!(peer.ip(), server.ip());
    assert_ne!(
        peer.port(),
        server.port(),
        "the client's end, not the server's"
    );
}
