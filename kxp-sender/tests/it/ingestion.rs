//! `POST /v1/events` and `POST /v1/endpoints`: validation, idempotency, and what is stored.

use serde_json::json;

use crate::support::{Receiver, sender, typed};

#[tokio::test]
async fn an_idempotency_key_returns_the_same_event_and_refuses_another_body() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let body = json!({"type": "payment.succeeded", "data": {"amount": 5}});
    let post = |body: serde_json::Value| {
        let api = s.api.clone();
        async move {
            let response = api
                .http
                .post(format!("{}/v1/events", api.base))
                .bearer_auth(&api.key)
                .header("Idempotency-Key", "order-42")
                .json(&body)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (first_status, first) = post(body.clone()).await;
    let (second_status, second) = post(body.clone()).await;
    assert_eq!((first_status, second_status), (202, 202));
    assert_eq!(
        first, second,
        "a replayed key returns the original response"
    );
    let id = first["id"].as_str().unwrap();
    s.api
        .wait_for(id, "delivered", std::time::Duration::from_secs(10))
        .await;
    assert_eq!(
        s.api.deliveries_of(id).await.len(),
        1,
        "never a second event or delivery"
    );
    assert_eq!(receiver.seen().len(), 1);

    let (status, error) = post(json!({"type": "payment.succeeded", "data": {"amount": 6}})).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn concurrent_requests_with_one_key_make_one_event() {
    let s = sender("0s").await;
    let body = json!({"type": "payment.succeeded", "data": {}});
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let api = s.api.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let response = api
                .http
                .post(format!("{}/v1/events", api.base))
                .bearer_auth(&api.key)
                .header("Idempotency-Key", "same")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 202);
            response.json::<serde_json::Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn invalid_input_is_refused_precisely_and_nothing_is_stored() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let raw = |body: &'static str| {
        let api = s.api.clone();
        async move {
            let response = api
                .http
                .post(format!("{}/v1/events", api.base))
                .bearer_auth(&api.key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    for (body, status, code) in [
        ("{not json", 400, "invalid_json"),
        (r#"{"data":{}}"#, 422, "invalid_request"),
        (r#"{"type":"payment.succeeded"}"#, 422, "invalid_request"),
        (r#"{"type":"","data":{}}"#, 422, "invalid_request"),
        (r#"{"type":"has space","data":{}}"#, 422, "invalid_request"),
        (
            r#"{"type":"t","data":{},"surprise":1}"#,
            422,
            "invalid_request",
        ),
        (
            r#"{"type":"t","data":{},"api_version":"no/slashes"}"#,
            422,
            "invalid_request",
        ),
    ] {
        let (got, error) = raw(body).await;
        assert_eq!(
            (got, error["error"].as_str().unwrap()),
            (status, code),
            "{body}: {error}"
        );
        assert!(!error["message"].as_str().unwrap().is_empty());
    }
    let all = s
        .api
        .client
        .deliveries(&kxp_api::DeliveryQuery::default())
        .await
        .unwrap();
    assert!(all.data.is_empty(), "nothing was stored: {all:?}");
    assert!(receiver.seen().is_empty());

    for (endpoint, fragment) in [
        (json!({"url": "ftp://example.test/x"}), "scheme"),
        (json!({"url": "not a url"}), "url"),
        (json!({"url": "http://user:pw@127.0.0.1/x"}), "credentials"),
        (
            json!({"url": receiver.url, "timeout_ms": 60000}),
            "timeout_ms",
        ),
        (
            json!({"url": receiver.url, "event_types": []}),
            "event_types",
        ),
        (
            json!({"url": receiver.url, "event_types": ["a b"]}),
            "event type",
        ),
    ] {
        let (status, error) = s
            .api
            .call("POST", "/v1/endpoints", Some(endpoint.clone()))
            .await;
        assert_eq!(status, 422, "{endpoint}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(fragment),
            "{endpoint}: {error}"
        );
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn outside_dev_mode_only_https_non_loopback_urls_are_accepted() {
    let s = crate::support::sender_with("0s", |c| c.dev = false).await;
    for url in [
        "http://127.0.0.1:9/x",
        "https://127.0.0.1/x",
        "https://localhost/x",
        "https://[::1]/x",
        "http://example.test/x",
    ] {
        let (status, error) = s
            .api
            .call("POST", "/v1/endpoints", Some(json!({"url": url})))
            .await;
        assert_eq!(status, 422, "{url}: {error}");
    }
    // Without the challenge, registration never connects, so a public-looking https URL is
    // accepted without traffic.
    let created = s
        .api
        .client
        .create_endpoint(&typed(
            json!({"url": "https://merchant.example/webhooks", "skip_challenge": true}),
        ))
        .await
        .unwrap();
    assert_eq!(created.secret.as_ref().unwrap().expose().len(), 64);
    s.server.shutdown().await;
}

#[tokio::test]
async fn the_api_needs_a_key_and_lists_page_by_page() {
    let s = sender("0s").await;
    let anonymous = s
        .api
        .http
        .get(format!("{}/v1/endpoints", s.api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = s
        .api
        .http
        .get(format!("{}/v1/endpoints", s.api.base))
        .bearer_auth("kxp_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let body: serde_json::Value = wrong.json().await.unwrap();
    assert_eq!(body["error"], "unauthorized");

    let receiver = Receiver::start(vec![]).await;
    for _ in 0..5 {
        s.api.endpoint(&receiver.url, json!({})).await;
    }
    // Raw: the first page is checked as sent (no `secret` in it).
    let (status, page1) = s.api.call("GET", "/v1/endpoints?limit=2", None).await;
    assert_eq!(status, 200, "{page1}");
    let cursor = page1["next_cursor"].as_str().unwrap();
    let page2 = s
        .api
        .client
        .list_endpoints(&typed(json!({"limit": 2, "cursor": cursor})))
        .await
        .unwrap();
    let page3 = s
        .api
        .client
        .list_endpoints(&kxp_api::PageQuery::limit(2).after(page2.next_cursor))
        .await
        .unwrap();
    assert_eq!(page3.data.len(), 1);
    assert!(page3.next_cursor.is_none());
    assert!(
        page1["data"][0].get("secret").is_none(),
        "lists never show secrets"
    );
    let (status, _) = s.api.call("GET", "/v1/endpoints/ep_nope", None).await;
    assert_eq!(status, 404);
    let health = s.api.client.healthz().await.unwrap();
    assert_eq!(health.database, "sqlite");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_chosen_event_id_is_the_events_id_and_makes_the_request_idempotent() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let id = "0190f1e2-7c3a-7def-8abc-0123456789ab";
    let body = json!({"id": id, "type": "payment.succeeded", "data": {"amount": 5}});

    let (status, first) = s.api.call("POST", "/v1/events", Some(body.clone())).await;
    assert_eq!((status, first["id"].as_str()), (202, Some(id)));
    let (status, again) = s.api.call("POST", "/v1/events", Some(body.clone())).await;
    assert_eq!(
        (status, &again),
        (202, &first),
        "a repeat answers the first event"
    );
    s.api
        .wait_for(id, "delivered", std::time::Duration::from_secs(10))
        .await;
    assert_eq!(s.api.deliveries_of(id).await.len(), 1);
    let seen = receiver.seen();
    assert_eq!(seen.len(), 1, "never a second event or delivery");
    assert_eq!(seen[0].event_id(), id, "the envelope carries the chosen id");
    assert_eq!(seen[0].header("x-kxp-event-id"), id);

    let other_body = json!({"id": id, "type": "payment.succeeded", "data": {"amount": 6}});
    let (status, error) = s.api.call("POST", "/v1/events", Some(other_body)).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (422, Some("idempotency_key_reused"))
    );

    // (Another account's events with the same id: isolation.rs.)
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_chosen_event_id_must_be_a_canonical_uuid() {
    let s = sender("0s").await;
    for id in [
        json!("0190F1E2-7C3A-7DEF-8ABC-0123456789AB"),
        json!("0190f1e27c3a7def8abc0123456789ab"),
        json!("{0190f1e2-7c3a-7def-8abc-0123456789ab}"),
        json!("00000000-0000-0000-0000-000000000000"),
        json!("order-42"),
        json!(""),
    ] {
        let body = json!({"id": id, "type": "payment.succeeded", "data": {}});
        let (status, error) = s.api.call("POST", "/v1/events", Some(body)).await;
        assert_eq!(
            (status, error["error"].as_str()),
            (422, Some("invalid_request")),
            "{id}"
        );
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .starts_with("id must be a UUID"),
            "{error}"
        );
    }
    let (status, error) = s
        .api
        .call(
            "POST",
            "/v1/events",
            Some(json!({"id": 7, "type": "t", "data": {}})),
        )
        .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (422, Some("invalid_request")),
        "{error}"
    );
    let (_, page) = s.api.call("GET", "/v1/events", None).await;
    assert_eq!(page["data"], json!([]), "nothing was stored");
    s.server.shutdown().await;
}

#[tokio::test]
async fn concurrent_requests_with_one_chosen_id_make_one_event() {
    let s = sender("0s").await;
    let body = json!({"id": "7d3c8f7e-52a1-4b8e-9a4f-1f2e3d4c5b6a", "type": "t", "data": {}});
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let api = s.api.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            api.call("POST", "/v1/events", Some(body)).await
        }));
    }
    for task in tasks {
        let (status, event) = task.await.unwrap();
        assert_eq!((status, event["id"].as_str()), (202, body["id"].as_str()));
    }
    let (_, page) = s.api.call("GET", "/v1/events", None).await;
    assert_eq!(page["data"].as_array().unwrap().len(), 1);
    s.server.shutdown().await;
}
