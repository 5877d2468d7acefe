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
