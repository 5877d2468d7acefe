//! Thin events: a `"payload": "thin"` endpoint is sent `{"id","type","api_version",
//! "created_at","thin":true}`, signed like any delivery, and its feed serves the same; its
//! receiver fetches the full envelope with the endpoint's credential, signed as a full delivery
//! would be; the fetch answers 404 for an event the endpoint was never sent and 410 once the
//! payload is gone.

use std::time::Duration;

use kxp_api::{EndpointId, NewEvent};
use kxp_verify::{Secret, Signer, Verifier, feed_request_message};
use serde_json::{Value, json};

use crate::pull::signed;
use crate::support::{Api, Database, Receiver, verifies};

const WITHIN: Duration = Duration::from_secs(10);

/// `GET /v1/endpoints/{endpoint}/events/{event}` signed with `secret`'s feed key: the status,
/// the headers and the body.
async fn fetch(
    api: &Api,
    endpoint: &str,
    event: &str,
    secret: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let target = format!("/v1/endpoints/{endpoint}/events/{event}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = Signer::new(Secret::new(secret).unwrap().feed_key())
        .sign(now, &feed_request_message("GET", &target, b""))
        .to_string();
    let response = api
        .http
        .get(format!("{}{target}", api.base))
        .header("x-kxp-feed-signature", header)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

each_backend!(a_thin_endpoint_is_sent_a_notice_and_its_receiver_fetches_the_event);
on_citus!(a_thin_endpoint_is_sent_a_notice_and_its_receiver_fetches_the_event);

async fn a_thin_endpoint_is_sent_a_notice_and_its_receiver_fetches_the_event(database: Database) {
    let s = database.sender("0s").await;
    let api = &s.api;
    let rx = Receiver::start(Vec::new()).await;
    let (thin, secret) = api.endpoint(&rx.url, json!({"payload": "thin"})).await;
    let (full, full_secret) = api.endpoint(&rx.url, json!({})).await;
    let (_, endpoint) = api
        .call("GET", &format!("/v1/endpoints/{thin}"), None)
        .await;
    assert_eq!(endpoint["payload"], "thin");

    let event = NewEvent::new("customer.updated", &json!({"email": "pii@example.com"}))
        .unwrap()
        .tags(["customer:cus_1"]);
    let id = api.client.create_event(&event, None).await.unwrap().id;
    let start = std::time::Instant::now();
    while rx.seen().len() < 2 {
        assert!(start.elapsed() < WITHIN);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let seen = rx.seen();
    let to_thin = seen
        .iter()
        .find(|s| s.header("x-kxp-endpoint-id") == thin)
        .unwrap();
    assert!(verifies(to_thin, &secret));
    let notice: Value = serde_json::from_slice(&to_thin.body).unwrap();
    assert_eq!(
        notice.as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["api_version", "created_at", "id", "thin", "type"]
    );
    assert_eq!(
        (notice["thin"].clone(), notice["id"].as_str()),
        (json!(true), Some(id.as_str()))
    );
    assert!(!String::from_utf8_lossy(&to_thin.body).contains("pii@example.com"));
    let to_full = seen
        .iter()
        .find(|s| s.header("x-kxp-endpoint-id") == full)
        .unwrap();
    assert!(String::from_utf8_lossy(&to_full.body).contains("pii@example.com"));

    // The fetch: the envelope byte for byte, with signature headers that verify.
    let (status, headers, body) = fetch(api, &thin, id.as_str(), &secret).await;
    assert_eq!(status, 200, "{body}");
    let (_, stored) = api.call("GET", &format!("/v1/events/{id}"), None).await;
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), stored);
    let signature = headers.get("x-kxp-signature").unwrap().to_str().unwrap();
    Verifier::from_secret_list(&secret)
        .unwrap()
        .verify_now(signature, body.as_bytes())
        .unwrap();
    // Another endpoint's credential, a wrong one, or an API key: refused.
    assert_eq!(fetch(api, &thin, id.as_str(), &full_secret).await.0, 401);
    let (status, _) = api
        .call("GET", &format!("/v1/endpoints/{thin}/events/{id}"), None)
        .await;
    assert_eq!(status, 401);
    // An event the endpoint was never sent: 404.
    let (other, other_secret) = api
        .endpoint(
            &rx.url,
            json!({"payload": "thin", "event_types": ["other.*"]}),
        )
        .await;
    assert_eq!(fetch(api, &other, id.as_str(), &other_secret).await.0, 404);

    // The feed serves the thin notice too, signed and MACed.
    let (status, page) = signed(
        api,
        "GET",
        &format!("/v1/endpoints/{thin}/feed?after=0"),
        "",
        &secret,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let item = &page["items"][0];
    let item_body: Value = serde_json::from_str(item["body"].as_str().unwrap()).unwrap();
    assert_eq!(item_body, notice);

    // Erased: the fetch is 410 `erased`.
    let erasure = api.client.create_erasure("customer:cus_1").await.unwrap();
    let start = std::time::Instant::now();
    while api.client.erasure(&erasure.id).await.unwrap().status != kxp_api::ErasureStatus::Done {
        assert!(start.elapsed() < WITHIN);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (status, _, body) = fetch(api, &thin, id.as_str(), &secret).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"],
        "erased"
    );

    // Switched back to full, the next delivery carries the envelope again.
    let switched = api
        .client
        .update_endpoint(
            &EndpointId::from(thin.clone()),
            &serde_json::from_value(json!({"payload": "full"})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(switched.endpoint.payload, kxp_api::PayloadMode::Full);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_endpoint_cannot_be_thin_and_an_unknown_mode_is_refused() {
    let s = crate::support::sender("0s").await;
    let (status, body) = s
        .api
        .call(
            "POST",
            "/v1/endpoints",
            Some(json!({"mode": "pull", "payload": "thin"})),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("invalid_request")),
        "{body}"
    );
    assert!(body["message"].as_str().unwrap().starts_with("payload"));
    let (status, body) = s
        .api
        .call(
            "POST",
            "/v1/endpoints",
            Some(json!({"url": "http://127.0.0.1:9/hook", "skip_challenge": true, "payload": "slim"})),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("invalid_request")),
        "{body}"
    );
    s.server.shutdown().await;
}
