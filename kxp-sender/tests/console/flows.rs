//! The console's flows end to end (issue 12, section 3, items 1 to 3), in the browser, against a
//! real loopback receiver whose answers the test switches (503 to fail, 200 to succeed) and a
//! server with a shrunk retry schedule (`0s,100ms`, no jitter, no circuit breaker): a merchant
//! registers an endpoint and sees its secret once; finds events by tag and by id; watches them
//! go dead, reads their attempts, replays one and then all from the dead letters and watches
//! them go through (the pages refresh themselves: the test never reloads them); and the
//! refusals along the way (a `read` session, another account's URLs, markup in an event).
//! Every page these flows visit is checked by axe-core and screenshotted (item 4).
//!
//! Every wait is capped ([`WAIT`]) and ends on a page's (or the API's) condition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kxp_api::{Delivery, DeliveryStatus, NewAccount, NewEndpoint, NewEvent, PortalScope};
use serde_json::{Value, json};

use crate::app::{Console, css, paths};
use crate::browser::{Audit, Browser, WAIT};

/// The retry schedule of these tests: a try, one retry 100 ms later, then dead.
const SCHEDULE: &str = "0s,100ms";

/// The search form's button.
const SEARCH: &str = r#"form[role="search"] button[type="submit"]"#;
/// The registration form's button.
const REGISTER: &str = r#"form[action$="/endpoints"] button[type="submit"]"#;
/// Every replay form (one delivery, or all).
const REPLAY_FORMS: &str = r#"form[action$="/replay"]"#;

// ---- the receiver ----

/// A receiver on 127.0.0.1: answers the endpoint challenge, and every POST with the status
/// (and body) the test sets.
struct Receiver {
    /// `http://127.0.0.1:<port>/hook`
    url: String,
    /// `http://127.0.0.1:<port>`
    base: String,
    answer: Answer,
}

#[derive(Clone)]
struct Answer {
    status: Arc<AtomicU16>,
    body: Arc<Mutex<String>>,
    posts: Arc<AtomicUsize>,
}

impl Receiver {
    /// Starts one that answers POSTs with 200.
    async fn start() -> Receiver {
        let answer = Answer {
            status: Arc::new(AtomicU16::new(200)),
            body: Arc::new(Mutex::new("ok".to_owned())),
            posts: Arc::new(AtomicUsize::new(0)),
        };
        let app = Router::new()
            .route("/hook", get(challenge).post(post))
            .with_state(answer.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("{base}/hook"),
            base,
            answer,
        }
    }

    /// POSTs get 503 from now on.
    fn fail(&self) {
        self.answer.status.store(503, Ordering::SeqCst);
    }

    /// POSTs get 200 from now on.
    fn succeed(&self) {
        self.answer.status.store(200, Ordering::SeqCst);
    }

    /// POSTs are answered with `body` from now on.
    fn answer_with(&self, body: &str) {
        *self.answer.body.lock().unwrap() = body.to_owned();
    }

    /// How many POSTs reached it.
    fn posts(&self) -> usize {
        self.answer.posts.load(Ordering::SeqCst)
    }
}

/// `GET /hook?challenge=<token>`: the token as the whole body.
async fn challenge(Query(query): Query<HashMap<String, String>>) -> Response {
    match query.get("challenge") {
        Some(token) => (StatusCode::OK, token.clone()).into_response(),
        None => StatusCode::BAD_REQUEST.into_response(),
    }
}

/// `POST /hook`: the status and body of the moment.
async fn post(State(answer): State<Answer>) -> Response {
    answer.posts.fetch_add(1, Ordering::SeqCst);
    let status = StatusCode::from_u16(answer.status.load(Ordering::SeqCst)).unwrap();
    let body = answer.body.lock().unwrap().clone();
    (status, body).into_response()
}

// ---- helpers ----

/// Emits an event of `event_type` with `data` and `tags` through the API (`POST /v1/events`)
/// with `client`'s key; answers its id.
async fn emit(client: &kxp_api::Client, event_type: &str, data: Value, tags: &[&str]) -> String {
    let new = NewEvent::new(event_type, &data)
        .unwrap()
        .tags(tags.iter().copied());
    let event = client
        .create_event(&new, None)
        .await
        .unwrap_or_else(|e| panic!("POST /v1/events: {e}"));
    event.id.into_string()
}

/// The deliveries of `event`, through the API.
async fn deliveries_of(client: &kxp_api::Client, event: &str) -> Vec<Delivery> {
    client
        .event_deliveries(&event.into())
        .await
        .unwrap_or_else(|e| panic!("GET /v1/events/{event}/deliveries: {e}"))
        .data
}

/// Registers an endpoint for `url` (subscribed to `order.*`) through the API; the challenge
/// runs (the receiver answers it). Answers its id.
async fn endpoint(client: &kxp_api::Client, url: &str) -> String {
    let mut new = NewEndpoint::new(url);
    new.event_types = Some(vec!["order.*".to_owned()]);
    client
        .create_endpoint(&new)
        .await
        .unwrap_or_else(|e| panic!("POST /v1/endpoints: {e}"))
        .endpoint
        .id
        .into_string()
}

/// Waits (capped, polling the API) until every delivery of each of `events` is in `status`.
async fn until_all(client: &kxp_api::Client, events: &[&str], status: DeliveryStatus) {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut done = true;
        for event in events {
            let deliveries = deliveries_of(client, event).await;
            done &= !deliveries.is_empty() && deliveries.iter().all(|d| d.status == status);
        }
        if done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the deliveries of {events:?} are not all {status:?} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The session's cookie and CSRF token, as the current page holds them.
async fn session_of(b: &Browser) -> (String, String) {
    let cookie = b
        .cookie(css::SESSION_COOKIE)
        .await
        .expect("a session cookie")
        .value()
        .to_owned();
    let csrf = b.attrs(&css::csrf_of(paths::SIGN_OUT), "value").await;
    assert_eq!(csrf.len(), 1, "the sign-out form's CSRF token");
    (cookie, csrf[0].clone())
}

/// The selector of delivery `id`'s section on an event page, followed by `rest`.
fn delivery(id: &str, rest: &str) -> String {
    format!(r#"section[id="{id}"]{rest}"#)
}

/// Asserts no JavaScript dialog is open: with one open, chromedriver refuses the next command
/// ("unexpected alert open") and this script fails the test.
async fn no_dialog(b: &Browser) {
    assert_eq!(
        b.execute("return 'no dialog';", vec![]).await,
        json!("no dialog")
    );
}

/// How many buttons in `main` say "Replay" (one delivery's, or all's).
async fn replay_buttons(b: &Browser) -> u64 {
    b.execute(
        "return [...document.querySelectorAll('main button, main a')] \
         .filter((e) => /replay/i.test(e.textContent)).length;",
        vec![],
    )
    .await
    .as_u64()
    .unwrap()
}

// ---- the flows ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merchant_registers_an_endpoint_and_sees_its_secret_once() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start_with_schedule(SCHEDULE).await;
    let r = Receiver::start().await;
    let mut audit = Audit::default();

    // A portal link signs the merchant in: the endpoints list, empty, and its button.
    c.sign_in(&b, PortalScope::Manage).await;
    b.find_text(css::MAIN, "No endpoints yet.").await;
    b.submit(r#"main a[href$="/endpoints/new"]"#).await;
    assert_eq!(b.path().await, c.shop_path("/endpoints/new"));
    assert_eq!(b.text(css::H1).await, "Register an endpoint");
    audit.page(&b, "endpoint-register").await;

    // A URL that does not answer the challenge: refused in words, the form kept.
    let elsewhere = format!("{}/elsewhere", r.base);
    b.type_into("#url", &elsewhere).await;
    b.type_into("#other_types", "order.*").await;
    b.type_into("#description", "Orders of the shop").await;
    b.submit(REGISTER).await;
    assert_eq!(b.status().await, 422);
    let why = b.text(css::ALERT).await;
    assert!(
        why.starts_with("Not registered:") && why.contains("challenge"),
        "{why}"
    );
    assert_eq!(b.attrs("#other_types", "value").await, ["order.*"]);
    assert!(c.shop.all_endpoints().await.unwrap().is_empty());
    audit.page(&b, "endpoint-register-refused").await;

    // The receiver's URL: registered (its challenge answered), and the secret shown once.
    b.set_value("#url", &r.url).await;
    b.submit(REGISTER).await;
    assert_eq!(b.status().await, 200);
    let here = b.path().await;
    let endpoints = c.shop.all_endpoints().await.unwrap();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    let registered = &endpoints[0];
    assert_eq!(registered.url, Some(r.url.clone()));
    assert_eq!(
        here,
        c.shop_path(&format!("/endpoints/{}", registered.id.as_str()))
    );
    let secret = b.text("#secret").await;
    assert!(secret.len() >= 32, "{secret:?}");
    assert!(b.find("#secret").await.is_displayed().await.unwrap());
    // The script shows the copy button (hidden without it); pressing it copies, or selects the
    // secret where the clipboard is refused (a headless browser may refuse it).
    let copy = b.find("button[data-copy]").await;
    assert!(copy.is_displayed().await.unwrap(), "the script did not run");
    copy.click().await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let said = b.text("button[data-copy]").await;
        if said == "Copied" || said == "Selected: press Ctrl+C" {
            break;
        }
        assert!(Instant::now() < deadline, "the copy button says {said:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let page = b.text(css::MAIN).await;
    assert!(page.contains(&r.url) && page.contains("order.*"), "{page}");
    audit.page(&b, "endpoint-registered").await;

    // A reload: no secret.
    b.goto(&c.url(&here)).await;
    assert_eq!(b.status().await, 200);
    assert_eq!(b.count("#secret").await, 0);
    assert!(!b.text(css::BODY).await.contains(&secret));
    audit.page(&b, "endpoint-detail").await;

    // The list has it (and no secret).
    b.goto(&c.url(&c.shop_path(""))).await;
    b.find_text("main table tbody tr a", &r.url).await;
    assert_eq!(b.count("main table tbody tr").await, 1);
    assert!(!b.text(css::BODY).await.contains(&secret));
    audit.page(&b, "endpoints").await;

    audit.check();
    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_locally_shows_a_kxp_listen_command_once_whose_token_makes_a_temporary_endpoint() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start_with_schedule(SCHEDULE).await;
    let mut audit = Audit::default();
    c.sign_in(&b, PortalScope::Manage).await;
    b.submit(r#"main a[href$="/listen"]"#).await;
    assert_eq!(b.path().await, c.shop_path("/listen"));
    assert_eq!(b.text(css::H1).await, "Listen locally");
    audit.page(&b, "listen").await;
    b.submit(r#"form[action$="/listen"] button[type="submit"]"#)
        .await;
    assert_eq!(b.path().await, c.shop_path("/listen"));
    let command = b.text("#listen-command").await;
    let words: Vec<&str> = command.split_whitespace().collect();
    let token = words[0]
        .strip_prefix("KXP_LISTEN_TOKEN=")
        .unwrap()
        .to_owned();
    assert!(token.starts_with("kxp_lt_"), "{command}");
    assert_eq!(&words[1..4], ["kxp", "listen", "--api-url"], "{command}");
    assert_eq!(words[4], c.base, "{command}");
    assert!(
        command.ends_with("--forward-to http://localhost:3000/webhooks"),
        "{command}"
    );
    audit.page(&b, "listen-command").await;

    // The token makes a temporary pull endpoint, and nothing else.
    let listening = kxp_api::Client::new(&c.base, &token).unwrap();
    let created = listening
        .create_endpoint(&NewEndpoint::pull().temporary())
        .await
        .unwrap();
    assert!(created.endpoint.temporary);
    let refused = listening.all_endpoints().await.unwrap_err();
    assert!(refused.to_string().contains("403"), "{refused}");
    // The list shows it for what it is, with its reader's lag.
    b.goto(&c.url(&c.shop_path(""))).await;
    let row = b
        .find_text("main table tbody tr", "temporary pull endpoint")
        .await
        .text()
        .await
        .unwrap();
    assert!(row.contains("0 unread of 0, never committed"), "{row}");

    // A reload of the page: no token.
    b.goto(&c.url(&c.shop_path("/listen"))).await;
    assert_eq!(b.count("#listen-command").await, 0);
    assert!(!b.text(css::BODY).await.contains(&token));

    audit.check();
    b.close().await;
    c.shutdown().await;
}

/// A server, a receiver and an endpoint of the shop subscribed to `order.*`, and `b` signed
/// in as the managing merchant.
async fn shop_with_endpoint(b: &Browser) -> (Console, Receiver) {
    let c = Console::start_with_schedule(SCHEDULE).await;
    let r = Receiver::start().await;
    endpoint(&c.shop, &r.url).await;
    c.sign_in(b, PortalScope::Manage).await;
    (c, r)
}

/// The dead deliveries' table of the dead-letter page (after a bulk replay, the replays'
/// table comes before it, in a section).
const DEAD_ROWS: &str = "main > table tbody tr";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_box_finds_an_event_by_tag_and_by_id() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let (c, _r) = shop_with_endpoint(&b).await;
    let mut audit = Audit::default();
    let tagged = emit(
        &c.shop,
        "order.paid",
        json!({"order": 1234, "amount": 4200}),
        &["order:1234", "customer:cus_9"],
    )
    .await;
    let other = emit(&c.shop, "order.paid", json!({"order": 1235}), &[]).await;

    // By tag: the tagged event only.
    b.goto(&c.url(&c.shop_path("/events"))).await;
    audit.page(&b, "search").await;
    b.type_into("#q", "order:1234").await;
    b.submit(SEARCH).await;
    assert_eq!(b.path().await, c.shop_path("/events"));
    let row = b.find_text("main table tbody tr", &tagged).await;
    let row = row.text().await.unwrap();
    assert!(
        row.contains("order:1234") && row.contains("customer:cus_9") && row.contains("order.paid"),
        "{row}"
    );
    assert_eq!(b.count("main table tbody tr").await, 1);
    assert!(!b.text(css::MAIN).await.contains(&other));
    audit.page(&b, "search-by-tag").await;

    // By id: straight to the event's page.
    b.goto(&c.url(&c.shop_path("/events"))).await;
    b.type_into("#q", &other).await;
    b.submit(SEARCH).await;
    assert_eq!(b.path().await, c.shop_path(&format!("/events/{other}")));
    b.find_text("main dl", &other).await;

    // By delivery id: its event's page, at the delivery.
    let delivery_id = deliveries_of(&c.shop, &tagged).await[0]
        .id
        .as_str()
        .to_owned();
    b.goto(&c.url(&c.shop_path("/events"))).await;
    b.type_into("#q", &delivery_id).await;
    b.submit(SEARCH).await;
    assert_eq!(b.path().await, c.shop_path(&format!("/events/{tagged}")));
    b.find(&delivery(&delivery_id, "")).await;

    // A tag nobody used: nothing.
    b.goto(&c.url(&c.shop_path("/events"))).await;
    b.type_into("#q", "order:9999").await;
    b.submit(SEARCH).await;
    b.find_text(css::MAIN, "No events match.").await;

    audit.check();
    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_delivery_shows_its_attempts_and_its_replay_from_the_dead_letters_goes_through() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let (c, r) = shop_with_endpoint(&b).await;
    let mut audit = Audit::default();
    r.fail();
    let event = emit(
        &c.shop,
        "order.paid",
        json!({"order": 1234}),
        &["order:1234"],
    )
    .await;
    let dead = deliveries_of(&c.shop, &event).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let dead = dead[0].id.as_str().to_owned();

    // The receiver fails: the delivery goes dead on the event's page, which refreshes itself;
    // its attempts say what the receiver answered.
    b.goto(&c.url(&c.shop_path(&format!("/events/{event}"))))
        .await;
    b.find(&delivery(&dead, " h3 .state.dead")).await;
    let attempts = delivery(&dead, " table tbody tr");
    assert_eq!(b.count(&attempts).await, 2, "the schedule {SCHEDULE}");
    for n in 1..=2 {
        let code = b
            .text(&format!("{attempts}:nth-child({n}) td:nth-child(4)"))
            .await;
        assert_eq!(code, "503", "attempt {n}");
    }
    assert_eq!(
        b.count(&delivery(&dead, &format!(" {REPLAY_FORMS}"))).await,
        1
    );
    audit.page(&b, "event-detail").await;

    // The receiver is fixed; the replay from the dead letters: the event's page shows it go
    // through, refreshing itself (the test does not reload it).
    r.succeed();
    b.goto(&c.url(&c.shop_path("/dead-letters"))).await;
    assert_eq!(b.count(DEAD_ROWS).await, 1);
    let row = b.find_text(DEAD_ROWS, &event).await.text().await.unwrap();
    assert!(row.contains("503"), "{row}");
    assert_eq!(
        b.text(r#"main a[href*="/dead-letters/replay"]"#).await,
        "Replay all 1…"
    );
    audit.page(&b, "dead-letters").await;
    b.submit(&format!(r#"button[aria-label="Replay delivery {dead}"]"#))
        .await;
    assert_eq!(b.path().await, c.shop_path(&format!("/events/{event}")));
    let replays = deliveries_of(&c.shop, &event).await;
    assert_eq!(replays.len(), 2, "{replays:?}");
    let replay = replays
        .iter()
        .find(|d| d.id.as_str() != dead)
        .unwrap()
        .id
        .as_str()
        .to_owned();
    // The replay's answer lands on `/events/<id>#<delivery id>`: the page's own refresh must
    // reload it (in Chromium, a `<meta http-equiv="refresh">` without a URL on a URL with a
    // fragment is a same-document fragment navigation, which reloads nothing).
    b.find(&delivery(&replay, " h3 .state.delivered")).await;
    let old = b.text(&delivery(&dead, " h3")).await;
    assert!(old.contains("dead (replayed)"), "{old}");
    audit.page(&b, "event-replayed").await;
    // The dead letters are empty again.
    b.goto(&c.url(&c.shop_path("/dead-letters"))).await;
    b.find_text(css::MAIN, "No dead deliveries.").await;

    audit.check();
    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_all_states_the_exact_count_and_the_dead_letters_show_them_delivered() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let (c, r) = shop_with_endpoint(&b).await;
    let mut audit = Audit::default();

    // Four go dead; "Replay all" counts them, exactly.
    r.fail();
    let mut dead = Vec::new();
    for order in 2000..2004 {
        let tag = format!("order:{order}");
        dead.push(emit(&c.shop, "order.refunded", json!({"order": order}), &[&tag]).await);
    }
    let refs: Vec<&str> = dead.iter().map(String::as_str).collect();
    until_all(&c.shop, &refs, DeliveryStatus::Dead).await;
    r.succeed();
    b.goto(&c.url(&c.shop_path("/dead-letters"))).await;
    assert_eq!(b.count(DEAD_ROWS).await, 4);
    b.submit(r#"main a[href*="/dead-letters/replay"]"#).await;
    assert_eq!(b.path().await, c.shop_path("/dead-letters/replay"));
    assert_eq!(b.status().await, 200);
    let question = b.text(css::MAIN).await;
    assert!(question.contains("Replay 4 dead deliveries?"), "{question}");
    let confirm = r#"main form[action$="/dead-letters/replay"] button[type="submit"]"#;
    assert_eq!(b.text(confirm).await, "Replay 4");
    audit.page(&b, "replay-confirm").await;

    // One more dies after the count: not part of the replay.
    r.fail();
    let late = emit(&c.shop, "order.refunded", json!({"order": 2999}), &[]).await;
    until_all(&c.shop, &[&late], DeliveryStatus::Dead).await;
    r.succeed();
    let posts = r.posts();
    b.submit(confirm).await;
    assert_eq!(b.path().await, c.shop_path("/dead-letters"));
    assert_eq!(
        b.text(r#"main [role="status"]"#).await,
        "4 dead deliveries were queued again."
    );
    // The page refreshes itself until every replay is through.
    let replays = r#"section[aria-labelledby="replays"] tbody"#;
    b.find(&format!("{replays}:not(:has(.state:not(.delivered)))"))
        .await;
    assert_eq!(b.count(&format!("{replays} tr")).await, 4);
    assert_eq!(b.count(&format!("{replays} .state.delivered")).await, 4);
    // Still dead: the late one only.
    assert_eq!(b.count(DEAD_ROWS).await, 1);
    b.find_text(DEAD_ROWS, &late).await;
    audit.page(&b, "dead-letters-replayed").await;
    assert_eq!(r.posts() - posts, 4);
    for event in &dead {
        let deliveries = deliveries_of(&c.shop, event).await;
        assert_eq!(deliveries.len(), 2, "{event}: {deliveries:?}");
        assert!(
            deliveries
                .iter()
                .any(|d| d.status == DeliveryStatus::Delivered)
        );
    }
    let late_now = deliveries_of(&c.shop, &late).await;
    assert_eq!(late_now.len(), 1, "{late_now:?}");
    assert_eq!(late_now[0].status, DeliveryStatus::Dead);

    audit.check();
    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_session_sees_no_replay_and_its_replays_are_refused() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start_with_schedule(SCHEDULE).await;
    let r = Receiver::start().await;
    let mut audit = Audit::default();
    endpoint(&c.shop, &r.url).await;
    r.fail();
    let event = emit(&c.shop, "order.paid", json!({"order": 1}), &["order:1"]).await;
    until_all(&c.shop, &[&event], DeliveryStatus::Dead).await;
    r.succeed();
    let dead = deliveries_of(&c.shop, &event).await[0]
        .id
        .as_str()
        .to_owned();
    let posts = r.posts();

    // A read session: the dead delivery, and no button that would replay it.
    c.sign_in(&b, PortalScope::Read).await;
    b.goto(&c.url(&c.shop_path(&format!("/events/{event}"))))
        .await;
    b.find(&delivery(&dead, " h3 .state.dead")).await;
    assert_eq!(b.count(REPLAY_FORMS).await, 0);
    assert_eq!(replay_buttons(&b).await, 0);
    audit.page(&b, "event-detail-read").await;
    b.goto(&c.url(&c.shop_path("/dead-letters"))).await;
    b.find_text("main table tbody tr", &event).await;
    assert_eq!(b.count(REPLAY_FORMS).await, 0);
    assert_eq!(replay_buttons(&b).await, 0);
    audit.page(&b, "dead-letters-read").await;
    let (cookie, csrf) = session_of(&b).await;
    // The confirmation is not for it either.
    b.goto(&c.url(&c.shop_path("/dead-letters/replay"))).await;
    assert_eq!(b.status().await, 403);
    assert_eq!(b.text(css::H1).await, "Read only");

    // Its cookie and CSRF token, posted by a plain client: 403 to both replays.
    let one = c.shop_path(&format!("/deliveries/{dead}/replay"));
    let all = c.shop_path("/dead-letters/replay");
    let dead_by = (kxp_sender::now_ms() + 60_000).to_string();
    assert_eq!(
        c.post_form(&cookie, &one, &[("csrf_token", &csrf)]).await,
        403
    );
    assert_eq!(
        c.post_form(
            &cookie,
            &all,
            &[("csrf_token", &csrf), ("dead_by", &dead_by)]
        )
        .await,
        403
    );
    // Nothing changed.
    let now = deliveries_of(&c.shop, &event).await;
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].status, DeliveryStatus::Dead);
    assert_eq!(now[0].replayed_by, None);
    assert_eq!(r.posts(), posts);

    // The same request from a managing session replays (the 403 was the scope's).
    b.delete_all_cookies().await;
    c.sign_in(&b, PortalScope::Manage).await;
    let (cookie, csrf) = session_of(&b).await;
    assert_eq!(
        c.post_form(&cookie, &one, &[("csrf_token", &csrf)]).await,
        303
    );
    let now = deliveries_of(&c.shop, &event).await;
    assert_eq!(now.len(), 2, "{now:?}");

    audit.check();
    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accounts_session_gets_404_for_another_accounts_events_and_deliveries() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start_with_schedule(SCHEDULE).await;
    let r = Receiver::start().await;

    // Account B, made by the operator, with an endpoint and a delivered event.
    let created = c
        .operator()
        .create_account(&NewAccount::new("Bravo Books"))
        .await
        .unwrap();
    let other_id = created.account.id.as_str().to_owned();
    let other = kxp_api::Client::new(&c.base, created.api_key.expose()).unwrap();
    let other_endpoint = endpoint(&other, &r.url).await;
    let other_event = emit(&other, "order.paid", json!({"order": 77}), &["order:77"]).await;
    until_all(&other, &[&other_event], DeliveryStatus::Delivered).await;
    let other_delivery = deliveries_of(&other, &other_event).await[0]
        .id
        .as_str()
        .to_owned();
    // And one of A's own, to show A's pages answer.
    endpoint(&c.shop, &r.url).await;
    let own = emit(&c.shop, "order.paid", json!({"order": 1}), &[]).await;

    c.sign_in(&b, PortalScope::Manage).await;
    b.goto(&c.url(&c.shop_path(&format!("/events/{own}"))))
        .await;
    assert_eq!(b.status().await, 200);

    let b_pages = format!("/console/a/{other_id}");
    for path in [
        c.shop_path(&format!("/events/{other_event}")),
        c.shop_path(&format!("/deliveries/{other_delivery}")),
        c.shop_path(&format!("/endpoints/{other_endpoint}")),
        b_pages.clone(),
        format!("{b_pages}/events"),
        format!("{b_pages}/events/{other_event}"),
        format!("{b_pages}/deliveries/{other_delivery}"),
        format!("{b_pages}/dead-letters"),
        format!("{b_pages}/endpoints/{other_endpoint}"),
    ] {
        b.goto(&c.url(&path)).await;
        assert_eq!(b.status().await, 404, "{path}");
        let body = b.text(css::BODY).await;
        assert!(
            !body.contains("Bravo Books") && !body.contains("order:77"),
            "{path}: {body}"
        );
    }
    // The search box finds nothing of B's: not its event's id, its delivery's, nor its tag.
    for q in [&other_event, &other_delivery, &"order:77".to_owned()] {
        b.goto(&c.url(&c.shop_path("/events"))).await;
        b.type_into("#q", q).await;
        b.submit(SEARCH).await;
        assert_eq!(b.path().await, c.shop_path("/events"), "{q}");
        b.find_text(css::MAIN, "No events match.").await;
    }
    // A replay of B's delivery with A's session (and its right CSRF token): 404, nothing done.
    let (cookie, csrf) = session_of(&b).await;
    for path in [
        c.shop_path(&format!("/deliveries/{other_delivery}/replay")),
        format!("{b_pages}/deliveries/{other_delivery}/replay"),
    ] {
        assert_eq!(
            c.post_form(&cookie, &path, &[("csrf_token", &csrf)]).await,
            404,
            "{path}"
        );
    }
    assert_eq!(deliveries_of(&other, &other_event).await.len(), 1);

    b.close().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_an_event_renders_as_text() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let c = Console::start_with_schedule(SCHEDULE).await;
    let r = Receiver::start().await;
    let mut audit = Audit::default();
    endpoint(&c.shop, &r.url).await;
    r.answer_with("<script>alert(3)</script>");
    let script = "<script>alert(1)</script>";
    let img = r#""><img src=x onerror=alert(2)>"#;
    let tag_script = "<script>alert(5)</script>";
    let tag_img = r#""><img/src=x/onerror=alert(6)>"#;
    let event = emit(
        &c.shop,
        "order.paid",
        json!({"note": script, "name": img}),
        &[tag_script, tag_img],
    )
    .await;
    until_all(&c.shop, &[&event], DeliveryStatus::Delivered).await;
    c.sign_in(&b, PortalScope::Manage).await;

    // The event's page: the envelope as text (JSON escapes the quote), and the receiver's
    // answer as text; no dialog, no element made of it.
    b.goto(&c.url(&c.shop_path(&format!("/events/{event}"))))
        .await;
    no_dialog(&b).await;
    let raw = b.find("pre.raw code").await;
    assert!(raw.is_displayed().await.unwrap());
    let text = raw.text().await.unwrap();
    assert!(text.contains(script), "{text}");
    assert!(
        text.contains(r#"\"><img src=x onerror=alert(2)>"#),
        "{text}"
    );
    let snippet = b
        .find_text("section.delivery td code", "<script>alert(3)</script>")
        .await;
    assert!(snippet.is_displayed().await.unwrap());
    assert_eq!(b.count("main script, img, body script").await, 0);
    audit.page(&b, "event-markup").await;

    // The search by that tag: the tags as text, and the box holding it as typed.
    b.goto(&c.url(&c.shop_path("/events"))).await;
    b.type_into("#q", tag_script).await;
    b.submit(SEARCH).await;
    no_dialog(&b).await;
    let badge = b.find_text("main table .badge", tag_script).await;
    assert!(badge.is_displayed().await.unwrap());
    b.find_text("main table .badge", tag_img).await;
    assert_eq!(b.attrs("#q", "value").await, [tag_script]);
    assert_eq!(b.count("main script, img, body script").await, 0);
    audit.page(&b, "search-markup").await;
    no_dialog(&b).await;

    audit.check();
    b.close().await;
    c.shutdown().await;
}
