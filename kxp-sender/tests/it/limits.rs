//! Every input has a documented bound, refused with a precise 4xx: URL length, event types per
//! endpoint, description, endpoints per account, unused portal links per account, event size,
//! and the Unicode of `data`.

use std::time::Duration;

use kxp_api::{ClientError, ErrorCode, NewAccount, NewPortalLink};
use kxp_sender::Db;
use serde_json::{Value, json};

use crate::console::Browser;
use crate::support::{Database, sender};

/// `POST /v1/events` with `body` as it is: bytes no JSON value could produce.
async fn post_event_bytes(s: &crate::support::Sender, body: Vec<u8>) -> reqwest::Response {
    s.api
        .http
        .post(format!("{}/v1/events", s.api.base))
        .bearer_auth(&s.api.key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

fn message(error: &Value) -> &str {
    error["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn endpoint_fields_are_bounded() {
    let s = sender("0s").await;
    let long_url = format!("http://127.0.0.1:9/{}", "a".repeat(2048));
    let cases = [
        (json!({"url": long_url}), "at most 2048 bytes"),
        (
            json!({"url": "http://127.0.0.1:9/hook", "event_types": vec!["a.b"; 65]}),
            "at most 64 patterns",
        ),
        (
            json!({"url": "http://127.0.0.1:9/hook", "description": "d".repeat(513)}),
            "at most 512 bytes",
        ),
    ];
    for (mut body, expected) in cases {
        body["skip_challenge"] = json!(true);
        let (status, error) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
        assert_eq!(status, 422, "{error}");
        assert_eq!(error["error"], "invalid_request");
        assert!(message(&error).contains(expected), "{error}");
    }
    // The same bounds on PATCH.
    let (id, _) = s.api.endpoint("http://127.0.0.1:9/hook", json!({})).await;
    let (status, error) = s
        .api
        .call(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"event_types": vec!["a.b"; 65]})),
        )
        .await;
    assert_eq!(status, 422, "{error}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_account_has_at_most_500_endpoints() {
    let s = sender("0s").await;
    for n in 0..500 {
        s.api
            .endpoint(&format!("http://127.0.0.1:9/hook/{n}"), json!({}))
            .await;
    }
    let body = json!({"url": "http://127.0.0.1:9/one-more", "skip_challenge": true});
    let (status, error) = s
        .api
        .call("POST", "/v1/endpoints", Some(body.clone()))
        .await;
    assert_eq!(status, 409, "{error}");
    assert_eq!(error["error"], "too_many_endpoints");
    // A deleted endpoint frees its place.
    let (_, page) = s.api.call("GET", "/v1/endpoints?limit=1", None).await;
    let first = page["data"][0]["id"].as_str().unwrap().to_owned();
    let (status, _) = s
        .api
        .call("DELETE", &format!("/v1/endpoints/{first}"), None)
        .await;
    assert_eq!(status, 200);
    let (status, error) = s.api.call("POST", "/v1/endpoints", Some(body)).await;
    assert_eq!(status, 201, "{error}");
    s.server.shutdown().await;
}

/// Runs `sql` (no parameters) on the sender's database, whichever it is.
async fn run_sql(db: &Db, sql: &str) {
    match db {
        Db::Sqlite(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
        Db::Postgres(pool) | Db::Citus(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
    }
    .unwrap();
}

/// What a new link for `client`'s account is refused with (`None`: it was made).
async fn link_refusal(client: &kxp_api::Client) -> Option<(u16, ErrorCode, Option<Duration>)> {
    match client.create_portal_link(&NewPortalLink::default()).await {
        Ok(_) => None,
        Err(ClientError::Api {
            status,
            code,
            retry_after,
            ..
        }) => Some((status, code, retry_after)),
        Err(e) => panic!("{e}"),
    }
}

each_backend!(an_account_has_at_most_1000_unused_portal_links);

async fn an_account_has_at_most_1000_unused_portal_links(database: Database) {
    let s = database.sender("0s").await;
    assert_eq!(kxp_sender::MAX_UNUSED_PORTAL_LINKS, 1_000);
    let client = &s.api.client;
    let mut links = Vec::new();
    for _ in 0..1_000 {
        links.push(
            client
                .create_portal_link(&NewPortalLink::default())
                .await
                .unwrap(),
        );
    }
    // The 1,001st: 429, and a Retry-After for when the first of them expires (15 minutes).
    let (status, code, retry_after) = link_refusal(client).await.expect("refused");
    assert_eq!((status, code), (429, ErrorCode::TooManyPortalLinks));
    let retry_after = retry_after.expect("a Retry-After");
    assert!(
        (Duration::from_secs(1)..=Duration::from_secs(900)).contains(&retry_after),
        "{retry_after:?}"
    );
    // Other accounts have their own.
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let op = s.api.with_key(&op_key).client;
    let other = op.create_account(&NewAccount::new("Shop B")).await.unwrap();
    let other = op.clone().for_account(other.account.id.clone());
    assert!(link_refusal(&other).await.is_none());

    // A used link frees its place, and so does an expired one; then it is full again.
    let response = Browser::of(&s).press_link(&links[0].url).await;
    assert_eq!(response.status(), 303);
    assert!(link_refusal(client).await.is_none());
    assert!(link_refusal(client).await.is_some());
    let token = links[1].url.rsplit('/').next().unwrap();
    let hash = kxp_sender::sha256_hex(token.as_bytes());
    run_sql(
        s.server.db(),
        &format!("UPDATE kxp_portal_links SET expires_at = 0 WHERE token_hash = '{hash}'"),
    )
    .await;
    assert!(link_refusal(client).await.is_none());
    let (status, code, _) = link_refusal(client).await.expect("full again");
    assert_eq!((status, code), (429, ErrorCode::TooManyPortalLinks));
    s.server.shutdown().await;
}

#[tokio::test]
async fn events_are_bounded_in_size_and_must_be_unicode() {
    let s = sender("0s").await;
    // `{"pad":"…"}` of exactly the limit is accepted; one byte more is 413.
    let limit = kxp_sender::MAX_EVENT_DATA;
    let at_limit = json!({"pad": "x".repeat(limit - r#"{"pad":""}"#.len())});
    let (status, error) = s
        .api
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "t", "data": at_limit})),
        )
        .await;
    assert_eq!(status, 202, "{error}");
    let over = json!({"pad": "x".repeat(limit + 1 - r#"{"pad":""}"#.len())});
    let (status, error) = s
        .api
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "t", "data": over})),
        )
        .await;
    assert_eq!(status, 413, "{error}");
    assert_eq!(error["error"], "payload_too_large");

    // A lone surrogate escape is valid JSON but no character: refused at ingestion.
    for data in [r#"{"name":"\ud800"}"#, r#"{"\udc00":1}"#] {
        let body = format!(r#"{{"type":"t","data":{data}}}"#);
        let response = post_event_bytes(&s, body.into_bytes()).await;
        assert_eq!(response.status(), 422, "{data}");
        let error: Value = response.json().await.unwrap();
        assert!(message(&error).contains("lone surrogate"), "{error}");
    }
    // A pair is a character.
    let (status, error) = s
        .api
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "t", "data": {"e": "😀"}})),
        )
        .await;
    assert_eq!(status, 202, "{error}");
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_key_over_its_request_rate_gets_429_and_other_keys_do_not() {
    let s = crate::support::sender_with("0s", |config| config.api_rate_limit = 5).await;
    let (_, b_key) = s.server.db().create_account("b", None).await.unwrap();
    let b = s.api.with_key(&b_key);
    // A burst of one second's worth, then refusals (well within that second: the rate refills
    // at 5/s, so 20 quick requests cannot all pass).
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..20 {
        let response = s
            .api
            .http
            .get(format!("{}/v1/endpoints", s.api.base))
            .bearer_auth(&s.api.key)
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let error: Value = response.json().await.unwrap();
            assert_eq!(error["error"], "rate_limited");
        }
    }
    assert!(statuses[..5].iter().all(|s| *s == 200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    // Another account's key has its own budget.
    let (status, _) = b.call("GET", "/v1/endpoints", None).await;
    assert_eq!(status, 200);
    s.server.shutdown().await;
}

#[tokio::test]
async fn the_event_limit_is_the_servers_setting() {
    let s = crate::support::sender_with("0s", |config| config.max_event_data = 1000).await;
    let data = |len: usize| json!({"pad": "x".repeat(len - r#"{"pad":""}"#.len())});
    let (status, error) = s
        .api
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "t", "data": data(1000)})),
        )
        .await;
    assert_eq!(status, 202, "{error}");
    let (status, error) = s
        .api
        .call(
            "POST",
            "/v1/events",
            Some(json!({"type": "t", "data": data(1001)})),
        )
        .await;
    assert_eq!(status, 413, "{error}");
    assert!(message(&error).contains("limit is 1000"), "{error}");
    // The body itself is read only up to the limit plus the request's overhead.
    let body = vec![b' '; 1000 + kxp_sender::REQUEST_OVERHEAD + 1];
    let response = post_event_bytes(&s, body).await;
    assert_eq!(response.status(), 413);
    s.server.shutdown().await;
}
