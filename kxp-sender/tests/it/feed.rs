//! The catch-up feed: an endpoint's events by number, read with the endpoint's own credential
//! (a request signed with the feed key of its secret, or its feed token), never an API key;
//! each item the body a delivery sends, signed anew, and MACed as a whole with the key of the
//! credential that read it; 410 past what retention purged; rate limited; there whatever the
//! deliveries' state.

use std::time::Duration;

use kxp_api::{EndpointCreated, FeedPage, NewEndpoint, RotateSecret};
use kxp_sender::Db;
use kxp_verify::{
    FeedItemFields, FeedPageFields, PublicKey, Secret, Signer, Verifier, feed_message,
};
use serde_json::{Value, json};

use crate::support::{Api, Database, Receiver, Reply, sender, typed};

const SECS_10: Duration = Duration::from_secs(10);

/// `GET /v1/endpoints/{id}/feed{query}`, signed at `t` with `key` (a feed key, or anything a
/// negative test signs with); the status and the body.
async fn signed_at(api: &Api, id: &str, query: &str, key: Secret, t: u64) -> (u16, Value) {
    let target = format!("/v1/endpoints/{id}/feed{query}");
    let header = Signer::new(key)
        .sign(t, &feed_message("GET", &target))
        .to_string();
    get(api, &target, &[("x-kxp-feed-signature", &header)]).await
}

pub(crate) async fn signed(api: &Api, id: &str, query: &str, secret: &str) -> (u16, Value) {
    let key = Secret::new(secret).unwrap().feed_key();
    signed_at(api, id, query, key, now()).await
}

async fn get(api: &Api, target: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut request = api.http.get(format!("{}{target}", api.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Waits until the endpoint's feed lists `count` items (the sequencer runs every poll).
async fn page_of(api: &Api, id: &str, secret: &str, count: u64) -> FeedPage {
    let start = std::time::Instant::now();
    loop {
        let (status, body) = signed(api, id, "", secret).await;
        assert_eq!(status, 200, "{body}");
        let page: FeedPage = typed(body);
        if page.latest >= count {
            return page;
        }
        assert!(start.elapsed() < SECS_10, "{page:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

each_backend!(the_feed_lists_dead_and_held_events_by_number_signed_anew);
on_citus!(the_feed_lists_dead_and_held_events_by_number_signed_anew);

async fn the_feed_lists_dead_and_held_events_by_number_signed_anew(db: Database) {
    let s = db.sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    receiver.answer_rest_with(500);
    let (id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let mut events = Vec::new();
    for i in 0..5 {
        let event = s.api.emit("payment.succeeded", json!({"n": i})).await;
        s.api.wait_for(&event, "dead", SECS_10).await;
        events.push(event);
    }
    // Held by a pause, too.
    s.api
        .client
        .pause_endpoint(&id.as_str().into())
        .await
        .unwrap();
    events.push(s.api.emit("payment.succeeded", json!({"n": 5})).await);

    let page = page_of(&s.api, &id, &secret, 6).await;
    assert_eq!(page.endpoint_id.as_str(), id);
    assert_eq!(page.latest, 6);
    let numbers: Vec<u64> = page.items.iter().map(|item| item.sequence).collect();
    assert_eq!(numbers, vec![1, 2, 3, 4, 5, 6]);
    let seen = receiver.seen();
    let verifier = Verifier::from_secret_list(&secret).unwrap();
    for (item, event) in page.items.iter().zip(&events) {
        assert_eq!(item.event_id.as_str(), event);
        assert_eq!(item.event_type, "payment.succeeded");
        // The body byte for byte as the deliveries carried it, with a signature of now.
        if let Some(delivered) = seen.iter().find(|r| r.event_id() == *event) {
            assert_eq!(item.body.as_bytes(), &delivered.body[..]);
        }
        let header = &item.headers["x-kxp-signature"];
        let verified = verifier.verify_now(header, item.body.as_bytes()).unwrap();
        assert!(verified.timestamp() + 60 > now());
    }

    // After a number, at most `limit`.
    let (status, body) = signed(&s.api, &id, "?after=3&limit=2", &secret).await;
    assert_eq!(status, 200, "{body}");
    let page: FeedPage = typed(body);
    let numbers: Vec<u64> = page.items.iter().map(|item| item.sequence).collect();
    assert_eq!(numbers, vec![4, 5]);
    let (status, body) = signed(&s.api, &id, "?after=6", &secret).await;
    assert_eq!(
        (status, body["items"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    for query in [
        "?limit=501",
        "?limit=0",
        "?after=9223372036854775808",
        "?after=-1",
    ] {
        let (status, body) = signed(&s.api, &id, query, &secret).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("invalid_query")),
            "{query}: {body}"
        );
    }
    s.server.shutdown().await;
}

#[tokio::test]
async fn the_feed_says_each_events_ordering_key() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let event = |data: Value, key: Option<&str>| json!({"type": "payment.updated", "data": data, "ordering_key": key});
    for (n, key) in [(1, Some("pay_1")), (2, None), (3, Some("pay_1"))] {
        let (status, body) = s
            .api
            .call("POST", "/v1/events", Some(event(json!({"n": n}), key)))
            .await;
        assert_eq!(status, 202, "{body}");
    }
    for bad in ["", "pay 1", &"k".repeat(129)] {
        let (status, body) = s
            .api
            .call("POST", "/v1/events", Some(event(json!({}), Some(bad))))
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (422, Some("invalid_request")),
            "{bad:?}: {body}"
        );
        assert!(body["message"].as_str().unwrap().contains("ordering_key"));
    }
    let page = page_of(&s.api, &id, &secret, 3).await;
    let keys: Vec<Option<&str>> = page
        .items
        .iter()
        .map(|item| item.ordering_key.as_deref())
        .collect();
    assert_eq!(keys, [Some("pay_1"), None, Some("pay_1")]);
    s.server.shutdown().await;
}

#[tokio::test]
async fn only_the_endpoints_own_feed_signature_opens_the_feed() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let (other, other_secret) = s.api.endpoint(&receiver.url, json!({})).await;
    s.api.emit("payment.succeeded", json!({})).await;
    page_of(&s.api, &id, &secret, 1).await;
    let target = format!("/v1/endpoints/{id}/feed");
    let unauthorized = |(status, body): (u16, Value)| {
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("unauthorized")),
            "{body}"
        );
        // Nothing of the secret in the answer.
        assert!(!body.to_string().contains(&secret));
    };
    // No credential; the platform's API key (never a feed credential).
    unauthorized(get(&s.api, &target, &[]).await);
    let bearer = format!("Bearer {}", s.api.key);
    unauthorized(get(&s.api, &target, &[("authorization", &bearer)]).await);
    // Signed with the webhook key itself rather than the feed key derived from it.
    unauthorized(signed_at(&s.api, &id, "", Secret::new(&secret).unwrap(), now()).await);
    // Another endpoint's secret; an endpoint that does not exist (the same answer).
    unauthorized(signed(&s.api, &id, "", &other_secret).await);
    let missing = "ep_0000000000000000000000000000dead";
    unauthorized(signed(&s.api, missing, "", &secret).await);
    // Older than the tolerance.
    let key = || Secret::new(&secret).unwrap().feed_key();
    unauthorized(signed_at(&s.api, &id, "", key(), now() - 301).await);
    // Signed for one query, sent with another.
    let header = Signer::new(key())
        .sign(now(), &feed_message("GET", &format!("{target}?after=0")))
        .to_string();
    unauthorized(
        get(
            &s.api,
            &format!("{target}?after=1"),
            &[("x-kxp-feed-signature", &header)],
        )
        .await,
    );
    // The other endpoint opens with its own.
    assert_eq!(signed(&s.api, &other, "", &other_secret).await.0, 200);
    s.server.shutdown().await;
}

#[tokio::test]
async fn an_ed25519_endpoint_reads_its_feed_with_a_feed_token() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let new: NewEndpoint = typed(json!({
        "url": receiver.url, "skip_challenge": true, "signing": "ed25519"
    }));
    let created: EndpointCreated = s.api.client.create_endpoint(&new).await.unwrap();
    let id = created.endpoint.id.clone();
    let key = PublicKey::from_base64(&created.public_key.unwrap().public_key).unwrap();
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;

    let target = format!("/v1/endpoints/{id}/feed");
    let first = s.api.client.create_feed_token(&id).await.unwrap();
    assert!(first.token.starts_with("kxpft_"), "{first:?}");
    let token = s.api.client.create_feed_token(&id).await.unwrap();
    let start = std::time::Instant::now();
    let page: FeedPage = loop {
        let bearer = format!("Bearer {}", token.token);
        let (status, body) = get(&s.api, &target, &[("authorization", &bearer)]).await;
        assert_eq!(status, 200, "{body}");
        let page: FeedPage = typed(body);
        if page.latest == 1 || start.elapsed() > SECS_10 {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(page.items.len(), 1, "{page:?}");
    let verifier = Verifier::with_public_keys([key]).unwrap();
    let item = &page.items[0];
    verifier
        .verify_now(&item.headers["x-kxp-signature"], item.body.as_bytes())
        .unwrap();
    // The first token was replaced by the second.
    let bearer = format!("Bearer {}", first.token);
    assert_eq!(
        get(&s.api, &target, &[("authorization", &bearer)]).await.0,
        401
    );
    s.server.shutdown().await;
}

#[tokio::test]
async fn numbers_retention_purged_answer_410_with_where_the_feed_resumes() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    for i in 0..3 {
        let event = s.api.emit("payment.succeeded", json!({"n": i})).await;
        s.api.wait_for(&event, "delivered", SECS_10).await;
    }
    page_of(&s.api, &id, &secret, 3).await;
    let db = Db::connect(&s.database_url).await.unwrap();
    let far = i64::MAX / 2;
    assert_eq!(
        db.purge(kxp_sender::Retention::until(Some(far)))
            .await
            .unwrap()
            .deliveries,
        3
    );
    let (status, body) = signed(&s.api, &id, "?after=1", &secret).await;
    assert_eq!(
        (status, body["error"].as_str(), body["earliest"].as_u64()),
        (410, Some("sequence_purged"), Some(4)),
        "{body}"
    );
    // `earliest` is MACed for the `after` it answers.
    let key = Secret::new(&secret).unwrap().feed_key();
    let mac = body["mac"].as_str().unwrap();
    assert!(
        FeedPageFields::purged(&id, 1, 4).verify_mac(&key, mac),
        "{body}"
    );
    assert!(!FeedPageFields::purged(&id, 0, 4).verify_mac(&key, mac));
    let event = s.api.emit("payment.succeeded", json!({"n": 3})).await;
    s.api.wait_for(&event, "delivered", SECS_10).await;
    let start = std::time::Instant::now();
    let page: FeedPage = loop {
        let (status, body) = signed(&s.api, &id, "?after=3", &secret).await;
        assert_eq!(status, 200, "{body}");
        let page: FeedPage = typed(body);
        if page.latest == 4 || start.elapsed() > SECS_10 {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(page.items[0].sequence, 4, "{page:?}");
    let (status, body) = signed(&s.api, &id, "", &secret).await;
    assert_eq!(
        (status, body["earliest"].as_u64()),
        (410, Some(4)),
        "{body}"
    );
    db.close().await;
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_feed_requests_is_answered_429() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![Reply::Status(200)]).await;
    let (id, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let (api, id, secret) = (s.api.clone(), id.clone(), secret.clone());
        requests.spawn(async move { signed(&api, &id, "", &secret).await });
    }
    let mut limited = 0;
    while let Some(answer) = requests.join_next().await {
        let (status, body) = answer.unwrap();
        match status {
            200 => {}
            429 => {
                assert_eq!(body["error"], "rate_limited");
                limited += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(limited > 0, "200 requests at once, 20 a second allowed");
    s.server.shutdown().await;
}

/// Whether the page (read with no `after`) and every item of it carry a MAC under `key` for
/// the endpoint `id`.
fn macs_verify(page: &FeedPage, id: &str, key: &Secret) -> bool {
    let frame = FeedPageFields::page(id, 0, page.latest);
    let framed = page
        .mac
        .as_deref()
        .is_some_and(|mac| frame.verify_mac(key, mac));
    framed
        && page.items.iter().all(|item| {
            let fields = FeedItemFields {
                endpoint_id: id,
                sequence: item.sequence,
                event_id: item.event_id.as_str(),
                ordering_key: item.ordering_key.as_deref(),
                body: item.body.as_bytes(),
            };
            item.mac
                .as_deref()
                .is_some_and(|mac| fields.verify_mac(key, mac))
        })
}

#[tokio::test]
async fn each_item_is_maced_with_the_key_of_the_credential_that_read_the_page() {
    let s = sender("0s").await;
    let receiver = Receiver::start(vec![]).await;
    let (id, old) = s.api.endpoint(&receiver.url, json!({})).await;
    for (n, key) in [(1, Some("pay_1")), (2, None)] {
        let event = json!({"type": "payment.updated", "data": {"n": n}, "ordering_key": key});
        let (status, body) = s.api.call("POST", "/v1/events", Some(event)).await;
        assert_eq!(status, 202, "{body}");
    }
    let page = page_of(&s.api, &id, &old, 2).await;
    let feed_key = |secret: &str| Secret::new(secret).unwrap().feed_key();
    assert_eq!(page.items.len(), 2, "{page:?}");
    assert!(macs_verify(&page, &id, &feed_key(&old)), "{page:?}");
    // Under no other key, and bound to the endpoint.
    assert!(!macs_verify(&page, &id, &Secret::new(&old).unwrap()));
    assert!(!macs_verify(&page, "ep_other", &feed_key(&old)));

    // During a rotation both secrets read the feed, each page MACed with the one that signed.
    let rotated = s
        .api
        .client
        .rotate_secret(&id.as_str().into(), &RotateSecret::overlap("1h"))
        .await
        .unwrap();
    let new = rotated.secret.unwrap().expose().to_owned();
    for (reader, other) in [(&old, &new), (&new, &old)] {
        let (status, body) = signed(&s.api, &id, "", reader).await;
        assert_eq!(status, 200, "{body}");
        let page: FeedPage = typed(body);
        assert_eq!(page.items.len(), 2, "{page:?}");
        assert!(macs_verify(&page, &id, &feed_key(reader)));
        assert!(!macs_verify(&page, &id, &feed_key(other)));
    }

    // With a feed token: the feed key of the secret that is the hex of the token's SHA-256.
    let token = s
        .api
        .client
        .create_feed_token(&id.as_str().into())
        .await
        .unwrap()
        .token;
    let bearer = format!("Bearer {token}");
    let target = format!("/v1/endpoints/{id}/feed");
    let (status, body) = get(&s.api, &target, &[("authorization", &bearer)]).await;
    assert_eq!(status, 200, "{body}");
    let page: FeedPage = typed(body);
    assert_eq!(page.items.len(), 2, "{page:?}");
    assert!(macs_verify(
        &page,
        &id,
        &Secret::from_feed_token(&token).feed_key()
    ));
    assert!(!macs_verify(&page, &id, &feed_key(&new)));
    s.server.shutdown().await;
}
