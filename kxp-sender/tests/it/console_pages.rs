//! The console's pages (issue 12, section 2) over real HTTP, as a browser without a cookie jar
//! would use them: registering an endpoint (the challenge answered by a loopback receiver, the
//! secret shown once), its actions, the event and delivery pages, the dead-letter queue with a
//! counted bulk replay that the page shows going through, and the operators' accounts list.
//! What a session may not see (another account's pages) or do (a `read` session, a form
//! without its CSRF token) is refused and changes nothing. The same flows in a real browser
//! are in tests/console.

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use kxp_api::{NewAccount, PortalScope};
use reqwest::StatusCode;
use reqwest::header::LOCATION;
use serde_json::json;

use crate::console::{Browser, cookie_pair, hidden};
use crate::support::{Database, Receiver, sender};

/// A receiver that answers the endpoint challenge (a GET echoing `challenge`) and 200 to posts.
async fn challenge_receiver() -> String {
    #[derive(serde::Deserialize)]
    struct Challenge {
        challenge: String,
    }
    let app = Router::new().route(
        "/hook",
        get(|Query(q): Query<Challenge>| async move { q.challenge }).post(|| async { "ok" }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A form post with its values percent-encoded.
pub(crate) async fn post_form(
    b: &Browser,
    path: &str,
    cookie: &str,
    form: &[(&str, &str)],
) -> reqwest::Response {
    let mut encoded = reqwest::Url::parse("http://form.invalid/").unwrap();
    encoded.query_pairs_mut().extend_pairs(form);
    b.http
        .post(format!("{}{path}", b.base))
        .header(reqwest::header::COOKIE, cookie)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(encoded.query().unwrap_or_default().to_owned())
        .send()
        .await
        .unwrap()
}

/// A page's status and text.
/// Signs in with `key` (an operator's, or an account's) through the sign-in form: the session
/// cookie.
pub(crate) async fn key_session(b: &Browser, key: &str) -> String {
    let sign_in = b.get("/console/sign-in", None).await;
    let sign_in_cookie = cookie_pair(&sign_in, "kxp_sign_in").unwrap();
    let form_csrf = hidden(&sign_in.text().await.unwrap(), "csrf_token");
    let signed = post_form(
        b,
        "/console/sign-in",
        &sign_in_cookie,
        &[("csrf_token", &form_csrf), ("key", key)],
    )
    .await;
    cookie_pair(&signed, "kxp_session").unwrap()
}

pub(crate) async fn page(b: &Browser, path: &str, cookie: &str) -> (StatusCode, String) {
    let response = b.get(path, Some(cookie)).await;
    (response.status(), response.text().await.unwrap())
}

/// The account page of a merchant session: its path (`/console/a/<id>`) and its CSRF token.
pub(crate) async fn account_page(b: &Browser, cookie: &str) -> (String, String) {
    let to = b.get("/console", Some(cookie)).await;
    assert_eq!(to.status(), StatusCode::SEE_OTHER);
    let path = to.headers()[LOCATION].to_str().unwrap().to_owned();
    let (status, html) = page(b, &path, cookie).await;
    assert_eq!(status, 200, "{html}");
    (path, hidden(&html, "csrf_token"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_registered_from_the_console_shows_its_secret_once() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (home, csrf) = account_page(&b, &cookie).await;

    // The form, then a registration whose challenge fails: the reason in words, nothing made.
    let (status, form) = page(&b, &format!("{home}/endpoints/new"), &cookie).await;
    assert_eq!(status, 200);
    assert_eq!(hidden(&form, "csrf_token"), csrf);
    let silent = Receiver::start(vec![]).await;
    let refused = post_form(
        &b,
        &format!("{home}/endpoints"),
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("url", &silent.url),
            ("other_types", "payment.*"),
        ],
    )
    .await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let text = refused.text().await.unwrap();
    assert!(
        text.contains("Not registered") && text.contains("challenge"),
        "{text}"
    );
    assert!(text.contains("payment.*"), "what was typed is kept: {text}");
    assert!(s.api.client.all_endpoints().await.unwrap().is_empty());

    // The challenge answered: registered, and the secret is on the page it redirects to, once.
    let url = challenge_receiver().await;
    let made = post_form(
        &b,
        &format!("{home}/endpoints"),
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("url", &url),
            ("other_types", "payment.succeeded, refund.*"),
            ("description", "orders <b>service</b>"),
            ("timeout_ms", "2000"),
            ("thin", "on"),
        ],
    )
    .await;
    assert_eq!(
        made.status(),
        StatusCode::SEE_OTHER,
        "{}",
        made.text().await.unwrap()
    );
    let endpoint_page = made.headers()[LOCATION].to_str().unwrap().to_owned();
    let endpoints = s.api.client.all_endpoints().await.unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0].event_types, ["payment.succeeded", "refund.*"]);
    assert_eq!(endpoints[0].payload, kxp_api::PayloadMode::Thin);
    assert!(endpoint_page.ends_with(endpoints[0].id.as_str()));
    let (_, shown) = page(&b, &endpoint_page, &cookie).await;
    let secret = shown
        .split("<code id=\"secret\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_else(|| panic!("no secret on {shown}"))
        .to_owned();
    assert!(secret.len() >= 32, "{secret}");
    // Its copy button comes with the console's one script file; no inline script anywhere.
    assert!(shown.contains("data-copy=\"secret\""), "{shown}");
    assert!(
        shown.matches("<script").count()
            == shown
                .matches("<script src=\"/console/assets/console.js\"")
                .count(),
        "{shown}"
    );
    assert!(
        shown.contains("orders &lt;b&gt;service&lt;/b&gt;"),
        "escaped: {shown}"
    );
    assert!(
        shown.contains("a thin notice (id, type, version, time)"),
        "{shown}"
    );
    // Shown once: a reload has it no more.
    let (_, again) = page(&b, &endpoint_page, &cookie).await;
    assert!(
        !again.contains(&secret) && !again.contains("id=\"secret\""),
        "{again}"
    );

    // Pause, resume, rotate (the new secret once, the old one's end said), delete with count.
    for (action, status) in [("pause", "paused"), ("resume", "active")] {
        let done = post_form(
            &b,
            &format!("{endpoint_page}/{action}"),
            &cookie,
            &[("csrf_token", &csrf)],
        )
        .await;
        assert_eq!(done.status(), StatusCode::SEE_OTHER);
        let listed = s.api.client.all_endpoints().await.unwrap();
        assert_eq!(listed[0].status.as_str(), status);
    }
    // A test event: to this endpoint only, shown on its way until delivered.
    let tested = post_form(
        &b,
        &format!("{endpoint_page}/test"),
        &cookie,
        &[("csrf_token", &csrf)],
    )
    .await;
    assert_eq!(tested.status(), StatusCode::SEE_OTHER);
    let event_page = tested.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(
        event_page.starts_with(&format!("{home}/events/")),
        "{event_page}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, html) = page(&b, &event_page, &cookie).await;
        assert!(html.contains("kxp.test"), "{html}");
        if html.contains("state delivered") {
            assert!(!html.contains("http-equiv=\"refresh\""), "{html}");
            break;
        }
        assert!(
            html.contains(&format!("content=\"2; url={}\"", event_page)),
            "{html}"
        );
        assert!(
            Instant::now() < deadline,
            "the test event was not delivered: {html}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rotated = post_form(
        &b,
        &format!("{endpoint_page}/rotate"),
        &cookie,
        &[("csrf_token", &csrf)],
    )
    .await;
    assert_eq!(rotated.status(), StatusCode::SEE_OTHER);
    let (_, shown) = page(&b, &endpoint_page, &cookie).await;
    assert!(
        shown.contains("id=\"secret\"") && !shown.contains(&secret),
        "{shown}"
    );
    assert!(
        shown.contains("The previous secret keeps signing until"),
        "{shown}"
    );
    // Edit: the form holds the settings; a bad value is refused with the form kept; a good
    // one is saved (the URL unchanged, so no challenge).
    let (status, form) = page(&b, &format!("{endpoint_page}/edit"), &cookie).await;
    assert_eq!(status, 200);
    assert!(
        form.contains("value=\"2000\"") && form.contains("refund.*"),
        "{form}"
    );
    let bad = post_form(
        &b,
        &format!("{endpoint_page}/edit"),
        &cookie,
        &[("csrf_token", &csrf), ("url", &url), ("timeout_ms", "soon")],
    )
    .await;
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.text()
            .await
            .unwrap()
            .contains("Not saved: the timeout must be a whole number")
    );
    let saved = post_form(
        &b,
        &format!("{endpoint_page}/edit"),
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("url", &url),
            ("other_types", "payment.*"),
            ("description", "orders"),
            ("timeout_ms", ""),
            ("rate_limit", "5"),
        ],
    )
    .await;
    assert_eq!(saved.status(), StatusCode::SEE_OTHER);
    let listed = s.api.client.all_endpoints().await.unwrap();
    assert_eq!(listed[0].description, "orders");
    assert_eq!(listed[0].event_types, ["payment.*"]);
    assert_eq!(listed[0].rate_limit_per_second, Some(5));
    assert_eq!(listed[0].timeout_ms, 2000, "left empty: unchanged");
    assert_eq!(
        listed[0].payload,
        kxp_api::PayloadMode::Full,
        "the thin box left unticked"
    );
    let (status, confirm) = page(&b, &format!("{endpoint_page}/delete"), &cookie).await;
    assert_eq!(status, 200);
    assert!(
        confirm.contains("<strong>0</strong> unfinished deliveries become dead"),
        "{confirm}"
    );
    let deleted = post_form(
        &b,
        &format!("{endpoint_page}/delete"),
        &cookie,
        &[("csrf_token", &csrf)],
    )
    .await;
    assert_eq!(deleted.status(), StatusCode::SEE_OTHER);
    assert!(s.api.client.all_endpoints().await.unwrap().is_empty());
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_need_the_csrf_token_and_a_session_that_may_change_things() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let receiver = Receiver::start(vec![]).await;
    let (endpoint, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let manage = b.session(&s.api.client, PortalScope::Manage).await;
    let read = b.session(&s.api.client, PortalScope::Read).await;
    let (home, csrf) = account_page(&b, &manage).await;
    let (_, read_csrf) = account_page(&b, &read).await;
    let pause = format!("{home}/endpoints/{endpoint}/pause");

    let no_token = post_form(&b, &pause, &manage, &[]).await;
    assert_eq!(no_token.status(), StatusCode::FORBIDDEN);
    let wrong = post_form(&b, &pause, &manage, &[("csrf_token", &read_csrf)]).await;
    assert_eq!(wrong.status(), StatusCode::FORBIDDEN);
    let read_only = post_form(&b, &pause, &read, &[("csrf_token", &read_csrf)]).await;
    assert_eq!(read_only.status(), StatusCode::FORBIDDEN);
    let listed = s.api.client.all_endpoints().await.unwrap();
    assert_eq!(listed[0].status.as_str(), "active", "nothing changed");
    // A read session sees no forms that would change anything, nor the registration form.
    let (_, read_page) = page(&b, &format!("{home}/endpoints/{endpoint}"), &read).await;
    assert!(
        !read_page.contains("/pause\"") && read_page.contains("read only"),
        "{read_page}"
    );
    assert_eq!(
        page(&b, &format!("{home}/endpoints/new"), &read).await.0,
        StatusCode::FORBIDDEN
    );
    // The manage session with its token: paused.
    let paused = post_form(&b, &pause, &manage, &[("csrf_token", &csrf)]).await;
    assert_eq!(paused.status(), StatusCode::SEE_OTHER);
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_accounts_pages_are_not_found_and_event_data_renders_as_text() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let receiver = Receiver::start(vec![]).await;
    let (endpoint, secret) = s.api.endpoint(&receiver.url, json!({})).await;
    let hostile = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    let event = s.api.emit("order.created", json!({"note": hostile})).await;
    let delivered = s
        .api
        .wait_for(&event, "delivered", Duration::from_secs(10))
        .await;
    let delivery = delivered["id"].as_str().unwrap().to_owned();

    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let op = s.api.with_key(&op_key).client;
    let other = op.create_account(&NewAccount::new("Shop B")).await.unwrap();
    let other_client = s.api.with_key(other.api_key.expose()).client;
    let mine = b.session(&s.api.client, PortalScope::Manage).await;
    let theirs = b.session(&other_client, PortalScope::Manage).await;
    let (home, _) = account_page(&b, &mine).await;

    // The owner sees the event, its delivery and attempts; the data as text, never as markup.
    let (status, html) = page(&b, &format!("{home}/events/{event}"), &mine).await;
    assert_eq!(status, 200);
    assert!(
        html.contains(&delivery) && html.contains("delivered"),
        "{html}"
    );
    // Which secret signed the attempt, by its fingerprint only.
    let fingerprint = kxp_verify::key_fingerprint(secret.as_bytes()).to_string();
    assert!(
        html.contains(&fingerprint) && !html.contains(&secret),
        "{html}"
    );
    assert!(
        !html.contains("<script>alert") && !html.contains("<img src=x"),
        "{html}"
    );
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    let to = b
        .get(&format!("{home}/deliveries/{delivery}"), Some(&mine))
        .await;
    assert_eq!(to.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        to.headers()[LOCATION],
        format!("{home}/events/{event}#{delivery}").as_str()
    );

    // Account B's session: every page of account A is a 404, like an id that does not exist.
    for path in [
        String::new(),
        format!("/events/{event}"),
        format!("/deliveries/{delivery}"),
        format!("/endpoints/{endpoint}"),
        "/dead-letters".to_owned(),
    ] {
        let (status, _) = page(&b, &format!("{home}{path}"), &theirs).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    // Nor can it find A's event under its own account.
    let (their_home, _) = account_page(&b, &theirs).await;
    assert_eq!(
        page(&b, &format!("{their_home}/events/{event}"), &theirs)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    s.server.shutdown().await;
}

each_backend!(
    dead_letters_are_replayed_in_bulk_exactly_as_counted_and_seen_going_through,
    operators_see_every_account_with_its_counts_and_open_its_pages
);
on_citus!(
    dead_letters_are_replayed_in_bulk_exactly_as_counted_and_seen_going_through,
    operators_see_every_account_with_its_counts_and_open_its_pages
);

async fn dead_letters_are_replayed_in_bulk_exactly_as_counted_and_seen_going_through(db: Database) {
    // One try: a failed delivery is dead at once.
    let s = db.sender("0s").await;
    let b = Browser::of(&s);
    let receiver = Receiver::start(vec![]).await;
    receiver.answer_rest_with(503);
    let (endpoint, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let mut events = Vec::new();
    for n in 0..3 {
        let event = s.api.emit("order.created", json!({"n": n})).await;
        s.api
            .wait_for(&event, "dead", Duration::from_secs(10))
            .await;
        events.push(event);
    }
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (home, csrf) = account_page(&b, &cookie).await;

    // The list shows them with the last answer; the endpoints page counts them.
    let (_, dead) = page(
        &b,
        &format!("{home}/dead-letters?endpoint={endpoint}"),
        &cookie,
    )
    .await;
    for event in &events {
        assert!(dead.contains(event.as_str()), "{dead}");
    }
    assert!(
        dead.contains("503") && dead.contains("Replay all 3"),
        "{dead}"
    );
    let (_, endpoints) = page(&b, &home, &cookie).await;
    assert!(
        endpoints.contains(&format!("dead-letters?endpoint={endpoint}\">3</a>")),
        "{endpoints}"
    );

    // The confirmation counts 3; one more dies after the count and is not replayed with them.
    let (_, confirm) = page(
        &b,
        &format!("{home}/dead-letters/replay?endpoint={endpoint}"),
        &cookie,
    )
    .await;
    assert!(
        confirm.contains("Replay <strong>3</strong> dead deliveries"),
        "{confirm}"
    );
    let dead_by = hidden(&confirm, "dead_by");
    let late = s.api.emit("order.created", json!({"n": 3})).await;
    s.api.wait_for(&late, "dead", Duration::from_secs(10)).await;
    receiver.answer_rest_with(200);
    let replayed = post_form(
        &b,
        &format!("{home}/dead-letters/replay"),
        &cookie,
        &[
            ("csrf_token", &csrf),
            ("dead_by", &dead_by),
            ("endpoint", &endpoint),
        ],
    )
    .await;
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
    let after = replayed.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(after.contains("queued=3"), "{after}");

    // The page shows the replays until all are delivered, refreshing itself meanwhile.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, html) = page(&b, &after, &cookie).await;
        assert!(
            html.contains("3 dead deliveries were queued again"),
            "{html}"
        );
        let delivered = html.matches("state delivered").count();
        let refreshing = html.contains("http-equiv=\"refresh\"");
        if delivered == 3 {
            assert!(
                !refreshing,
                "a page with nothing on its way stays put: {html}"
            );
            // The one that died after the count is still there, alone.
            assert!(
                html.contains(late.as_str()) && html.contains("Replay all 1"),
                "{html}"
            );
            break;
        }
        assert!(refreshing, "{html}");
        assert!(
            Instant::now() < deadline,
            "the replays did not go through: {html}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Replaying one from its event's page: it goes through too.
    let dead_one = s.api.typed_deliveries_of(&late).await[0].id.to_string();
    let one = post_form(
        &b,
        &format!("{home}/deliveries/{dead_one}/replay"),
        &cookie,
        &[("csrf_token", &csrf)],
    )
    .await;
    assert_eq!(one.status(), StatusCode::SEE_OTHER);
    s.api
        .wait_for(&late, "delivered", Duration::from_secs(10))
        .await;
    s.server.shutdown().await;
}

async fn operators_see_every_account_with_its_counts_and_open_its_pages(db: Database) {
    let s = db.sender("0s").await;
    let b = Browser::of(&s);
    let (_, op_key) = s.server.db().create_operator("Olga").await.unwrap();
    let op = s.api.with_key(&op_key).client;
    let shop = op
        .create_account(&NewAccount::new("Shop <B>"))
        .await
        .unwrap();
    let cookie = key_session(&b, &op_key).await;

    let (status, html) = page(&b, "/console", &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("Olga") && html.contains("Shop &lt;B&gt;"),
        "{html}"
    );
    let shop_page = format!("/console/a/{}", shop.account.id);
    assert!(html.contains(&format!("href=\"{shop_page}\"")), "{html}");
    let (status, html) = page(&b, &shop_page, &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains("All accounts") && html.contains("No endpoints yet"),
        "{html}"
    );
    assert_eq!(
        page(&b, "/console/a/acc_nope", &cookie).await.0,
        StatusCode::NOT_FOUND
    );

    // The audit log: the operator's API change (with the account it named) and a console
    // change, newest first; a merchant's session has no such page.
    let for_shop = op.clone().for_account(shop.account.id.clone());
    let receiver = Receiver::start(vec![]).await;
    let mut new = kxp_api::NewEndpoint::new(&receiver.url);
    new.skip_challenge = true;
    // With credentials: the audit row names the route, never the body.
    new.headers = Some([("X-Gateway-Key".to_owned(), "audit-gw-s3cret".into())].into());
    let endpoint = for_shop.create_endpoint(&new).await.unwrap().endpoint.id;
    // A second endpoint that fails: its one event's delivery goes dead (one try). The list
    // counts the shop's endpoints, open circuits and dead deliveries.
    let failing = Receiver::start(vec![]).await;
    failing.answer_rest_with(500);
    let mut new = kxp_api::NewEndpoint::new(&failing.url);
    new.skip_challenge = true;
    new.event_types = Some(vec!["order.failed".to_owned()]);
    for_shop.create_endpoint(&new).await.unwrap();
    let event = kxp_api::NewEvent::new("order.failed", &json!({"n": 1})).unwrap();
    for_shop.create_event(&event, None).await.unwrap();
    let id = &shop.account.id;
    let counted = format!(
        "{id}</code></small></td><td>2</td><td>0</td><td><a href=\"/console/a/{id}/dead-letters\">1</a></td>"
    );
    let started = std::time::Instant::now();
    loop {
        let (_, html) = page(&b, "/console", &cookie).await;
        if html.contains(&counted) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{counted} not in {html}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, shop_page_html) = page(&b, &format!("{shop_page}/endpoints/{endpoint}"), &cookie).await;
    let csrf = hidden(&shop_page_html, "csrf_token");
    let paused = post_form(
        &b,
        &format!("{shop_page}/endpoints/{endpoint}/pause"),
        &cookie,
        &[("csrf_token", &csrf)],
    )
    .await;
    assert_eq!(paused.status(), StatusCode::SEE_OTHER);
    let (status, audit) = page(&b, "/console/audit", &cookie).await;
    assert_eq!(status, 200);
    let console_at = audit
        .find("endpoint.pause")
        .unwrap_or_else(|| panic!("{audit}"));
    let api_at = audit
        .find("POST /v1/endpoints")
        .unwrap_or_else(|| panic!("{audit}"));
    assert!(console_at < api_at, "newest first: {audit}");
    assert!(audit.contains("POST /v1/accounts"), "{audit}");
    assert!(!audit.contains("audit-gw-s3cret"), "{audit}");
    assert!(
        audit.contains(shop.account.id.as_str()) && audit.contains(endpoint.as_str()),
        "{audit}"
    );
    let merchant = b.session(&s.api.client, PortalScope::Manage).await;
    assert_eq!(
        page(&b, "/console/audit", &merchant).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        page(&b, "/console/notifications", &merchant).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        page(&b, "/console/notifications", &cookie).await.0,
        StatusCode::OK
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_box_finds_an_event_by_id_delivery_id_or_tag() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let receiver = Receiver::start(vec![]).await;
    s.api.endpoint(&receiver.url, json!({})).await;
    let (status, tagged) = s
        .api
        .call(
            "POST",
            "/v1/events",
            Some(json!({
                "type": "order.paid", "data": {"n": 1}, "tags": ["order:1234", "customer:cus_9"]
            })),
        )
        .await;
    assert_eq!(status, 202, "{tagged}");
    let tagged = tagged["id"].as_str().unwrap().to_owned();
    let other = s.api.emit("order.refunded", json!({"n": 2})).await;
    let delivery = s
        .api
        .wait_for(&other, "delivered", Duration::from_secs(10))
        .await;
    let cookie = b.session(&s.api.client, PortalScope::Read).await;
    let (home, _) = account_page(&b, &cookie).await;

    // By tag: the tagged event only, its tags shown.
    let (status, html) = page(&b, &format!("{home}/events?q=order%3A1234"), &cookie).await;
    assert_eq!(status, 200);
    assert!(html.contains(&tagged) && !html.contains(&other), "{html}");
    assert!(html.contains("customer:cus_9"), "{html}");
    // By type, without a tag.
    let (_, html) = page(&b, &format!("{home}/events?type=order.refunded"), &cookie).await;
    assert!(html.contains(&other) && !html.contains(&tagged), "{html}");
    // By id, and by delivery id: straight to the event.
    let by_id = b
        .get(&format!("{home}/events?q={other}"), Some(&cookie))
        .await;
    assert_eq!(
        by_id.headers()[LOCATION],
        format!("{home}/events/{other}").as_str()
    );
    let dlv = delivery["id"].as_str().unwrap();
    let by_delivery = b
        .get(&format!("{home}/events?q={dlv}"), Some(&cookie))
        .await;
    assert_eq!(
        by_delivery.headers()[LOCATION],
        format!("{home}/events/{other}#{dlv}").as_str()
    );
    // By delivery status: the deliveries.
    let (_, html) = page(&b, &format!("{home}/events?status=delivered"), &cookie).await;
    assert!(html.contains(dlv), "{html}");
    // A time that is not one is said so.
    let (_, html) = page(&b, &format!("{home}/events?since=yesterday"), &cookie).await;
    assert!(html.contains("is not a time"), "{html}");
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_a_deleted_endpoint_are_shown_but_offer_no_replay() {
    let s = sender("0s").await;
    let b = Browser::of(&s);
    let receiver = Receiver::start(vec![]).await;
    receiver.answer_rest_with(503);
    let (endpoint, _) = s.api.endpoint(&receiver.url, json!({})).await;
    let event = s.api.emit("order.created", json!({"n": 1})).await;
    s.api
        .wait_for(&event, "dead", Duration::from_secs(10))
        .await;
    let endpoint_id = kxp_api::EndpointId::from(endpoint.as_str());
    s.api.client.delete_endpoint(&endpoint_id).await.unwrap();
    let cookie = b.session(&s.api.client, PortalScope::Manage).await;
    let (home, _) = account_page(&b, &cookie).await;
    let (status, html) = page(&b, &format!("{home}/dead-letters"), &cookie).await;
    assert_eq!(status, 200);
    assert!(
        html.contains(event.as_str()) && html.contains("a deleted endpoint"),
        "{html}"
    );
    assert!(
        !html.contains("/replay\"") && !html.contains("Replay all"),
        "{html}"
    );
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_records_which_key_the_kxp_receiver_says_verified_it() {
    use kxp_axum::{Receiver as KxpReceiver, VerifiedEvent, VerifyLayer};

    let s = sender("0s").await;
    let b = Browser::of(&s);
    // A real kxp-axum receiver, configured with the endpoint's secret once it is known.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (_, secret) = s.api.endpoint(&url, json!({})).await;
    let verifier = kxp_verify::Verifier::from_secret_list(&secret).unwrap();
    let app = Router::new().route(
        "/hook",
        axum::routing::post(|_: VerifiedEvent| async { "ok" })
            .layer(VerifyLayer::new(KxpReceiver::new(verifier))),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let event = s.api.emit("order.created", json!({"n": 1})).await;
    s.api
        .wait_for(&event, "delivered", Duration::from_secs(10))
        .await;

    let cookie = b.session(&s.api.client, PortalScope::Read).await;
    let (home, _) = account_page(&b, &cookie).await;
    let (_, html) = page(&b, &format!("{home}/events/{event}"), &cookie).await;
    let fingerprint = kxp_verify::key_fingerprint(secret.as_bytes()).to_string();
    assert!(html.contains("Verified with"), "{html}");
    // Signed with it, and verified with it: the fingerprint in both columns.
    assert_eq!(html.matches(&fingerprint).count(), 2, "{html}");
    assert!(!html.contains(&secret), "{html}");
    s.server.shutdown().await;
}
