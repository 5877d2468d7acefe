//! Content filters (`filter` on an endpoint): ANDed with `event_types`; an event the filter
//! does not take creates no delivery for that endpoint and takes no sequence number, while
//! the endpoints without a filter get every event; the dry run (`POST
//! /v1/endpoints/{id}/test-filter`) over the newest events; a fault refused with its place;
//! `null` and `{}` remove a filter; the console's filter page (try, save, refusal, a session
//! that may only look). The semantics, operator by operator, are kxp-filter's table test.

use std::time::Duration;

use kxp_api::{EndpointPatch, Patch, PortalScope, TestFilter};
use serde_json::{Value, json};

use crate::console::Browser;
use crate::console_pages::{account_page, page, post_form};
use crate::sequence::{gapless, numbered};
use crate::support::{Api, Database, Receiver, sender};

each_backend!(filters_route_by_content_and_leave_no_delivery_and_no_number_behind);
on_citus!(filters_route_by_content_and_leave_no_delivery_and_no_number_behind);

/// Emits an event with tags; returns its id.
async fn emit(api: &Api, event_type: &str, data: Value, tags: &[&str]) -> String {
    let event = kxp_api::NewEvent::new(event_type, &data)
        .unwrap()
        .tags(tags.iter().copied());
    api.client
        .create_event(&event, None)
        .await
        .unwrap_or_else(|e| panic!("POST /v1/events: {e}"))
        .id
        .into_string()
}

async fn filters_route_by_content_and_leave_no_delivery_and_no_number_behind(db: Database) {
    let s = db.sender("0s").await;
    let filtered = Receiver::start(vec![]).await;
    let everything = Receiver::start(vec![]).await;
    let filter = json!({
        "data.amount": {"$gte": 10000},
        "$or": [{"tags": "vip"}, {"data.currency": "USD"}]
    });
    let (big, _) = s
        .api
        .endpoint(
            &filtered.url,
            json!({"event_types": ["payment.*"], "filter": filter}),
        )
        .await;
    let (all, _) = s.api.endpoint(&everything.url, json!({})).await;

    let mut ids = Vec::new();
    for (event_type, data, tags) in [
        (
            "payment.succeeded",
            json!({"amount": 25000, "currency": "EUR"}),
            &["vip"][..],
        ),
        (
            "payment.succeeded",
            json!({"amount": 500, "currency": "USD"}),
            &["vip"],
        ),
        (
            "payment.succeeded",
            json!({"amount": 20000, "currency": "USD"}),
            &[],
        ),
        // Taken by the filter, not by the types: the two are ANDed.
        (
            "refund.created",
            json!({"amount": 30000, "currency": "USD"}),
            &[],
        ),
        // A string is not a number.
        (
            "payment.succeeded",
            json!({"amount": "25000", "currency": "USD"}),
            &[],
        ),
    ] {
        ids.push(emit(&s.api, event_type, data, tags).await);
        // Events of one millisecond are ordered by their random ids: keep them apart, so
        // that "newest first" is this order.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let [e1, e2, e3, e4, e5] = <[String; 5]>::try_from(ids).unwrap();

    // The unfiltered endpoint gets all five, the filtered one e1 and e3, numbered 1 and 2.
    let numbers = gapless(&numbered(&s.api, &all, 5, "delivered").await);
    assert_eq!(numbers.len(), 5);
    let taken = numbered(&s.api, &big, 2, "delivered").await;
    let numbers = gapless(&taken);
    assert_eq!(numbers.len(), 2, "{taken:?}");
    assert!(numbers[&e1] < numbers[&e3], "{numbers:?}");
    for event in [&e2, &e4, &e5] {
        let deliveries = s.api.typed_deliveries_of(event).await;
        assert_eq!(deliveries.len(), 1, "{event}: {deliveries:?}");
        assert_eq!(deliveries[0].endpoint_id.as_str(), all);
    }
    let mut seen: Vec<String> = filtered.seen().iter().map(|s| s.event_id()).collect();
    seen.sort();
    let mut expected = vec![e1.clone(), e3.clone()];
    expected.sort();
    assert_eq!(seen, expected);

    // The endpoint shows its filter as given.
    let shown = s.api.client.endpoint(&big.as_str().into()).await.unwrap();
    assert_eq!(shown.endpoint.filter, Some(filter));

    // The dry run: the endpoint's own filter, alone (so e4, of a type the endpoint does not
    // take, matches), newest first.
    let id = big.as_str().into();
    let tried = s
        .api
        .client
        .test_filter(&id, &TestFilter::default())
        .await
        .unwrap();
    assert_eq!((tried.tested, tried.matched), (5, 3));
    let matches: Vec<&str> = tried.matches.iter().map(|m| m.as_str()).collect();
    assert_eq!(matches, [e4.as_str(), e3.as_str(), e1.as_str()]);
    // A given filter, over the two newest events only.
    let tried = s
        .api
        .client
        .test_filter(
            &id,
            &TestFilter::new(Some(json!({"type": "refund.created"})), Some(2)),
        )
        .await
        .unwrap();
    assert_eq!((tried.tested, tried.matched), (2, 1));
    assert_eq!(tried.matches[0].as_str(), e4);

    // Faults: the place in the filter, for a change and for a dry run; the limit's range.
    let bad = json!({"filter": {"$and": [{"data.amount": {"$gt": true}}]}});
    let (status, body) = s
        .api
        .call("PATCH", &format!("/v1/endpoints/{big}"), Some(bad.clone()))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("filter at /$and/0/data.amount/$gt"),
        "{body}"
    );
    let path = format!("/v1/endpoints/{big}/test-filter");
    let (status, body) = s.api.call("POST", &path, Some(bad)).await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = s.api.call("POST", &path, Some(json!({"limit": 0}))).await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = s
        .api
        .call("POST", &path, Some(json!({"filter": {"amount": 1}})))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"amount\""),
        "{body}"
    );
    let (status, _) = s
        .api
        .call(
            "POST",
            "/v1/endpoints/ep_00000000000000000000000000000000/test-filter",
            None,
        )
        .await;
    assert_eq!(status, 404);

    // `null` removes the filter: the next small payment goes to both.
    let mut patch = EndpointPatch::default();
    patch.filter = Patch::Clear;
    let changed = s.api.client.update_endpoint(&id, &patch).await.unwrap();
    assert_eq!(changed.endpoint.filter, None);
    let e6 = emit(&s.api, "payment.succeeded", json!({"amount": 1}), &[]).await;
    s.api
        .wait_for(&e6, "delivered", Duration::from_secs(30))
        .await;
    assert_eq!(s.api.typed_deliveries_of(&e6).await.len(), 2);
    // A change that leaves `filter` out keeps it; `{}` is no filter either.
    patch.filter = Patch::Set(json!({"tags": "vip"}));
    s.api.client.update_endpoint(&id, &patch).await.unwrap();
    let mut other = EndpointPatch::default();
    other.description = Some("vip only".to_owned());
    let changed = s.api.client.update_endpoint(&id, &other).await.unwrap();
    assert_eq!(changed.endpoint.filter, Some(json!({"tags": "vip"})));
    patch.filter = Patch::Set(json!({}));
    let changed = s.api.client.update_endpoint(&id, &patch).await.unwrap();
    assert_eq!(changed.endpoint.filter, None);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_tries_and_saves_a_filter_and_a_reader_may_only_try() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (account, csrf) = account_page(&b, &cookie).await;
    let receiver = Receiver::start(vec![]).await;
    let (id, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let big = emit(&s.api, "payment.succeeded", json!({"amount": 25000}), &[]).await;
    emit(&s.api, "payment.succeeded", json!({"amount": 5}), &[]).await;
    let filter_page = format!("{account}/endpoints/{id}/filter");
    let (status, html) = page(&b, &filter_page, &cookie).await;
    assert_eq!(status, 200, "{html}");
    let typed = r#"{"data.amount": {"$gte": 10000}}"#;

    // A dry run is a POST like any form: without the session's token, 403.
    let forged = post_form(
        &b,
        &format!("{filter_page}/try"),
        &cookie,
        &[("filter", typed), ("limit", "")],
    )
    .await;
    assert_eq!(forged.status(), 403);
    let tried = post_form(
        &b,
        &format!("{filter_page}/try"),
        &cookie,
        &[("csrf_token", &csrf), ("filter", typed), ("limit", "")],
    )
    .await;
    assert_eq!(tried.status(), 200);
    let tried = tried.text().await.unwrap();
    assert!(
        tried.contains("Of the 2 newest events, the filter takes 1."),
        "{tried}"
    );
    assert!(tried.contains(&format!("/events/{big}")), "{tried}");
    assert!(
        s.api
            .client
            .endpoint(&id.as_str().into())
            .await
            .unwrap()
            .endpoint
            .filter
            .is_none(),
        "trying saves nothing"
    );

    let refused = post_form(
        &b,
        &filter_page,
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("filter", r#"{"data.amount": {"$gt": [1]}}"#),
        ],
    )
    .await;
    assert_eq!(refused.status(), 422);
    let refused = refused.text().await.unwrap();
    assert!(
        refused
            .contains("filter at /data.amount/$gt: $gt takes a number or a string, not an array"),
        "{refused}"
    );
    // The textarea keeps what was typed.
    assert!(
        refused.contains("{&quot;data.amount&quot;: {&quot;$gt&quot;: [1]}}"),
        "{refused}"
    );

    let saved = post_form(
        &b,
        &filter_page,
        &cookie,
        &[("csrf_token", &csrf), ("filter", typed)],
    )
    .await;
    assert_eq!(saved.status(), 303);
    let shown = s
        .api
        .client
        .endpoint(&id.as_str().into())
        .await
        .unwrap()
        .endpoint;
    assert_eq!(shown.filter, Some(json!({"data.amount": {"$gte": 10000}})));
    let (_, endpoint) = page(&b, &format!("{account}/endpoints/{id}"), &cookie).await;
    assert!(
        endpoint.contains("{&quot;data.amount&quot;:{&quot;$gte&quot;:10000}}"),
        "{endpoint}"
    );

    // The console's test event goes where it is sent, whatever the filter says.
    let sent = post_form(
        &b,
        &format!("{account}/endpoints/{id}/test"),
        &cookie,
        &[("csrf_token", &csrf)],
    )
    .await;
    assert_eq!(sent.status(), 303);
    let start = std::time::Instant::now();
    let is_test = |seen: &crate::support::Seen| {
        serde_json::from_slice::<Value>(&seen.body).unwrap()["type"] == "kxp.test"
    };
    while !receiver.seen().iter().any(is_test) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the test event never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A reader sees the filter and may try one, but not save.
    let reader = b.session(&s.api.client, PortalScope::Read).await;
    let (_, reader_csrf) = account_page(&b, &reader).await;
    let (status, html) = page(&b, &filter_page, &reader).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("Try it") && !html.contains("Save the filter"),
        "{html}"
    );
    let tried = post_form(
        &b,
        &format!("{filter_page}/try"),
        &reader,
        &[("csrf_token", &reader_csrf), ("filter", ""), ("limit", "1")],
    )
    .await;
    assert_eq!(tried.status(), 200);
    assert!(
        tried
            .text()
            .await
            .unwrap()
            .contains("Of the 1 newest events, the filter takes 1.")
    );
    let saved = post_form(
        &b,
        &filter_page,
        &reader,
        &[("csrf_token", &reader_csrf), ("filter", "")],
    )
    .await;
    assert_eq!(saved.status(), 403);

    // Empty removes it.
    let saved = post_form(
        &b,
        &filter_page,
        &cookie,
        &[("csrf_token", &csrf), ("filter", " ")],
    )
    .await;
    assert_eq!(saved.status(), 303);
    assert!(
        s.api
            .client
            .endpoint(&id.as_str().into())
            .await
            .unwrap()
            .endpoint
            .filter
            .is_none()
    );
    s.server.shutdown().await;
}
