//! Thin events on the receiver's side: kxp-axum's and kxp-actix's `thin_events` fetch the full
//! event behind a thin delivery from a real sender and verify it, so the handler gets the full
//! event; a fetched event that does not verify, or is another event, is refused (502) and never
//! handled; an erased event is answered 200 `gone` without the handler.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use kxp_axum::catch_up::{Credential, FeedClient, ThinEvents};
use kxp_axum::{Receiver, VerifiedEvent, VerifyLayer};
use kxp_verify::{Secret, Signer, Verifier};
use serde_json::{Value, json};

use crate::{SECS_20, register, sender, serve, wait_status};

/// What the handler was given: each event's id and `data`.
type Handled = Arc<Mutex<Vec<(String, Value)>>>;

/// A kxp-axum receiver of `secret` that takes thin deliveries through the sender at `base`.
async fn receiver(base: &str, secret: &str) -> (String, Handled) {
    let handled = Handled::default();
    let feed = FeedClient::new(base, Credential::Secret(Secret::new(secret).unwrap())).unwrap();
    let layer = VerifyLayer::new(Receiver::new(Verifier::from_secret_list(secret).unwrap()))
        .thin_events(ThinEvents::new(feed));
    let route = post(
        |State(handled): State<Handled>, event: VerifiedEvent| async move {
            handled
                .lock()
                .unwrap()
                .push((event.id().to_owned(), event.data().clone()));
            "ok"
        },
    )
    .layer(layer);
    let (url, _) = serve(
        Router::new()
            .route("/hook", route)
            .with_state(handled.clone()),
    )
    .await;
    (url, handled)
}

/// A thin notice of event `id`, signed with `secret` now, posted to `url` for `endpoint`: the
/// status and body of the answer.
async fn post_notice(url: &str, secret: &str, endpoint: &str, id: &str) -> (u16, String) {
    let body = json!({
        "id": id, "type": "payment.succeeded", "api_version": "2026-11-01",
        "created_at": "2026-12-05T00:00:00Z", "thin": true
    })
    .to_string();
    let signature = Signer::from_secret_list(secret)
        .unwrap()
        .sign_now(body.as_bytes())
        .to_string();
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header(kxp_verify::SIGNATURE_HEADER, signature)
        .header(kxp_verify::ENDPOINT_ID_HEADER, endpoint)
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_of_a_thin_endpoint_gets_the_full_verified_event() {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = sender(dir.path()).await;
    let base = format!("http://{}", server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let (url, handled) = receiver(&base, &secret).await;
    let patch: kxp_api::EndpointPatch =
        serde_json::from_value(json!({"url": url, "skip_challenge": true, "payload": "thin"}))
            .unwrap();
    client
        .update_endpoint(&endpoint.as_str().into(), &patch)
        .await
        .unwrap();

    let data = json!({"amount": 4200, "email": "pii@example.com"});
    let event = kxp_api::NewEvent::new("payment.succeeded", &data)
        .unwrap()
        .tags(["customer:cus_9"]);
    let id = client
        .create_event(&event, None)
        .await
        .unwrap()
        .id
        .into_string();
    wait_status(&client, &id, "delivered").await;
    assert_eq!(*handled.lock().unwrap(), vec![(id.clone(), data)]);

    // Erased, its thin notice (a late retry, say) is answered without the handler.
    let erasure = client.create_erasure("customer:cus_9").await.unwrap();
    let start = Instant::now();
    while client.erasure(&erasure.id).await.unwrap().status != kxp_api::ErasureStatus::Done {
        assert!(start.elapsed() < SECS_20);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, body) = post_notice(&url, &secret, &endpoint, &id).await;
    assert_eq!((status, body.as_str()), (200, r#"{"outcome":"gone"}"#));
    assert_eq!(handled.lock().unwrap().len(), 1);

    // A notice naming no endpoint cannot be fetched: 503, the sender retries.
    let response = reqwest::Client::new()
        .post(&url)
        .header(
            kxp_verify::SIGNATURE_HEADER,
            Signer::from_secret_list(&secret)
                .unwrap()
                .sign_now(
                    br#"{"id":"e1","type":"t","api_version":"v","created_at":"c","thin":true}"#,
                )
                .to_string(),
        )
        .body(r#"{"id":"e1","type":"t","api_version":"v","created_at":"c","thin":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.text().await.unwrap().contains("thin_fetch_failed"));
    server.shutdown().await;
}

/// A sender that answers every fetch with `body` signed with `signing_secret`.
async fn forging_sender(body: String, signing_secret: String) -> String {
    let app = Router::new().route(
        "/v1/endpoints/{endpoint}/events/{event}",
        get(move |Path((_, _)): Path<(String, String)>| {
            let (body, secret) = (body.clone(), signing_secret.clone());
            async move {
                let signature = Signer::from_secret_list(&secret)
                    .unwrap()
                    .sign_now(body.as_bytes())
                    .to_string();
                ([(kxp_verify::SIGNATURE_HEADER, signature)], body)
            }
        }),
    );
    let (url, _) = serve(app).await;
    url.trim_end_matches("/hook").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_altered_fetch_is_refused_and_never_handled() {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let id = "6f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62";
    let envelope = |id: &str| {
        json!({"id": id, "type": "payment.succeeded", "api_version": "2026-11-01",
            "created_at": "2026-12-05T00:00:00Z", "data": {"amount": 1}})
        .to_string()
    };
    for (body, signed_with, why) in [
        (
            envelope(id),
            "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "signed with another secret",
        ),
        (
            envelope("7f1c2b0e-8d4a-4c1e-9f3b-7a1d2c4e5f62"),
            secret,
            "another event",
        ),
        (
            json!({"id": id, "type": "payment.succeeded", "api_version": "2026-11-01",
                "created_at": "2026-12-05T00:00:00Z", "thin": true})
            .to_string(),
            secret,
            "a thin notice again",
        ),
    ] {
        let base = forging_sender(body, signed_with.to_owned()).await;
        let (url, handled) = receiver(&base, secret).await;
        let (status, answer) = post_notice(&url, secret, "ep_1", id).await;
        assert_eq!(status, 502, "{why}: {answer}");
        assert!(answer.contains("thin_unverified"), "{why}: {answer}");
        assert!(handled.lock().unwrap().is_empty(), "{why}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kxp_actix_hands_its_handler_the_full_event_of_a_thin_delivery() {
    use actix_web::{App, HttpServer, web};
    use kxp_actix::VerifyMiddleware;

    let dir = tempfile::tempdir().unwrap();
    let (server, client) = sender(dir.path()).await;
    let base = format!("http://{}", server.addr());
    let (endpoint, secret) = register(&client, "http://127.0.0.1:9/hook").await;
    let handled = Handled::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (started, handle) = std::sync::mpsc::channel();
    {
        let (handled, secret, base) = (handled.clone(), secret.clone(), base.clone());
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let feed = kxp_actix::catch_up::FeedClient::new(
                    &base,
                    kxp_actix::catch_up::Credential::Secret(Secret::new(&secret).unwrap()),
                )
                .unwrap();
                let verify = VerifyMiddleware::new(kxp_actix::Receiver::new(
                    Verifier::from_secret_list(&secret).unwrap(),
                ))
                .thin_events(kxp_actix::catch_up::ThinEvents::new(feed));
                let server = HttpServer::new(move || {
                    let handled = handled.clone();
                    App::new().service(
                        web::resource("/hook")
                            .route(web::post().to(move |event: kxp_actix::VerifiedEvent| {
                                let handled = handled.clone();
                                async move {
                                    handled
                                        .lock()
                                        .unwrap()
                                        .push((event.id().to_owned(), event.data().clone()));
                                    "ok"
                                }
                            }))
                            .wrap(verify.clone()),
                    )
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .unwrap()
                .run();
                started.send(server.handle()).unwrap();
                server.await.unwrap();
            });
        });
    }
    let actix = handle.recv().unwrap();
    let patch: kxp_api::EndpointPatch =
        serde_json::from_value(json!({"url": url, "skip_challenge": true, "payload": "thin"}))
            .unwrap();
    client
        .update_endpoint(&endpoint.as_str().into(), &patch)
        .await
        .unwrap();
    let data = json!({"amount": 7});
    let event = kxp_api::NewEvent::new("payment.succeeded", &data).unwrap();
    let id = client
        .create_event(&event, None)
        .await
        .unwrap()
        .id
        .into_string();
    wait_status(&client, &id, "delivered").await;
    assert_eq!(*handled.lock().unwrap(), vec![(id, data)]);
    actix.stop(true).await;
    server.shutdown().await;
}
