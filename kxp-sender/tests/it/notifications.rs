//! Notifications: when an endpoint's circuit opens and when it is disabled, the merchant gets
//! one signed operational webhook at the account's ops URL and one e-mail at its contact
//! address (through a real SMTP server on 127.0.0.1), once per state change, retried when a
//! channel fails. Also the account settings behind them (`GET`/`PATCH /v1/account`).

use std::time::{Duration, Instant};

use kxp_sender::NoticeNext;
use kxp_sender::Protection;
use kxp_testkit::smtp::SmtpSink;
use serde_json::{Value, json};

use crate::support::{Receiver, Reply, Sender, sender_with, typed, value, values, verifies};

const WITHIN: Duration = Duration::from_secs(20);

async fn status_of(s: &Sender, ep: &str) -> String {
    let endpoint = s.api.client.endpoint(&ep.into()).await.unwrap();
    value(&endpoint)["status"].as_str().unwrap().to_owned()
}

async fn notifications(s: &Sender) -> Vec<Value> {
    let page = s
        .api
        .client
        .notifications(&kxp_api::PageQuery::default())
        .await
        .unwrap_or_else(|e| panic!("GET /v1/notifications: {e}"));
    values(page.data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuit_opened_and_disabled_each_notify_once_by_webhook_and_email() {
    let smtp = SmtpSink::start().await;
    // Each channel fails its first try: a notice is retried, not lost.
    smtp.refuse_next(1);
    let ops = Receiver::start(vec![Reply::Status(500)]).await;
    let smtp_url = smtp.url();
    let s = sender_with(
        "0s,10ms,20ms,30ms,40ms,50ms,60ms,70ms,80ms,90ms,100ms,110ms,120ms,130ms,140ms,150ms,160ms,170ms,180ms,190ms",
        move |c| {
            c.smtp_url = Some(smtp_url);
            c.smtp_from = "kxp <kxp@platform.example>".to_owned();
            c.protection = Protection {
                breaker_failures: 2,
                breaker_cooldown: Duration::from_millis(50),
                breaker_cooldown_max: Duration::from_millis(100),
                disable_after: Duration::from_millis(1500),
                rate_limit: 0,
            };
        },
    )
    .await;
    let account = s
        .api
        .client
        .update_account(&typed(
            json!({"ops_url": ops.url, "contact_email": "ops@shop.example"}),
        ))
        .await
        .unwrap();
    let ops_secret = account.ops_secret.unwrap().expose().to_owned();
    assert_eq!(ops_secret.len(), 64);
    // Shown once (raw: the answer is checked as sent, without `ops_secret`).
    let (_, again) = s.api.call("GET", "/v1/account", None).await;
    assert_eq!(again["ops_url"], ops.url.as_str(), "{again}");
    assert!(again.get("ops_secret").is_none(), "{again}");

    let rx = Receiver::start(vec![]).await;
    rx.answer_rest_with(503);
    let (ep, _) = s.api.endpoint(&rx.url, json!({})).await;
    let event = s.api.emit("payment.succeeded", json!({"n": 1})).await;

    // Open → one notice; the failed probes that follow re-open the circuit without another;
    // disabled → the second notice.
    let start = Instant::now();
    while status_of(&s, &ep).await != "disabled" {
        assert!(start.elapsed() < WITHIN, "the endpoint was not disabled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deliveries = s.api.deliveries_of(&event).await;
    let attempts = deliveries[0]["attempts"].as_i64().unwrap();
    assert!(
        attempts >= 4,
        "several probes failed before the disable: {attempts}"
    );

    let mails = smtp.wait_for(2, WITHIN).await;
    let start = Instant::now();
    while ops.seen().len() < 3 {
        assert!(
            start.elapsed() < WITHIN,
            "ops webhooks: {:?}",
            ops.seen().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing more comes (a look after a while: a repeat would show here).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(smtp.messages().len(), 2);
    let hooks = ops.seen();
    assert_eq!(hooks.len(), 3, "one refused try, then the two notices");

    // The webhooks: signed with the ops secret, the same envelope shape as an event.
    assert_eq!(
        hooks[0].body, hooks[1].body,
        "the retry sends the same bytes"
    );
    let kinds: Vec<Value> = hooks[1..]
        .iter()
        .map(|hook| {
            assert!(
                verifies(hook, &ops_secret),
                "not signed with the ops secret"
            );
            let notice: Value = serde_json::from_slice(&hook.body).unwrap();
            assert_eq!(
                hook.header("x-kxp-event-id"),
                notice["id"].as_str().unwrap()
            );
            assert_eq!(notice["data"]["endpoint_id"], ep.as_str(), "{notice}");
            assert_eq!(notice["data"]["url"], rx.url.as_str(), "{notice}");
            assert_eq!(notice["data"]["last_error"], "http_503", "{notice}");
            notice["type"].clone()
        })
        .collect();
    assert_eq!(
        kinds,
        [json!("endpoint.circuit_opened"), json!("endpoint.disabled")]
    );

    // The e-mails: to the contact address, from the configured sender, saying what happened.
    for mail in &mails {
        assert_eq!(mail.to, ["ops@shop.example"]);
        assert_eq!(mail.from, "kxp@platform.example");
        assert!(mail.body().contains(&ep), "{}", mail.body());
        assert!(mail.body().contains(&rx.url), "{}", mail.body());
    }
    let subjects: Vec<String> = mails.iter().map(|m| m.subject().unwrap()).collect();
    assert_eq!(
        subjects,
        [
            format!("[kxp] Endpoint failing, deliveries paused: {}", rx.url),
            format!("[kxp] Endpoint disabled: {}", rx.url),
        ]
    );
    assert!(
        mails[1]
            .body()
            .contains(&format!("POST /v1/endpoints/{ep}/resume"))
    );

    // The outbox as the API shows it: four notices, all sent; the first of each channel took
    // two tries.
    let start = Instant::now();
    let listed = loop {
        let listed = notifications(&s).await;
        if listed.len() == 4 && listed.iter().all(|n| n["status"] == "sent") {
            break listed;
        }
        assert!(start.elapsed() < WITHIN, "{listed:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let summary: Vec<(String, String, i64)> = listed
        .iter()
        .map(|n| {
            (
                n["kind"].as_str().unwrap().to_owned(),
                n["channel"].as_str().unwrap().to_owned(),
                n["attempts"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("endpoint.circuit_opened", "webhook", 2),
        ("endpoint.circuit_opened", "email", 2),
        ("endpoint.disabled", "webhook", 1),
        ("endpoint.disabled", "email", 1),
    ];
    for (kind, channel, tries) in expected {
        assert!(
            summary.contains(&(kind.to_owned(), channel.to_owned(), tries)),
            "{kind} {channel} in {tries} tries: {summary:?}"
        );
    }
    // No secret in what the API lists.
    let text = serde_json::to_string(&listed).unwrap();
    assert!(!text.contains(&ops_secret));
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_settings_are_checked() {
    let s = sender_with("0s", |_| {}).await;
    let bad = [
        (json!({"contact_email": "not an address"}), "contact_email"),
        (json!({"ops_url": "ftp://shop.example/ops"}), "scheme"),
        // --dev lets loopback through, and nothing else private.
        (json!({"ops_url": "http://10.1.2.3/ops"}), "blocked"),
        (
            json!({"ops_url": "https://user:pw@shop.example/ops"}),
            "credentials",
        ),
        (
            json!({"default_api_version": "no spaces"}),
            "default_api_version",
        ),
        (json!({"name": ""}), "name"),
        (json!({"ops_secret": "mine"}), "unknown field"),
        (json!({"name": null}), "null"),
    ];
    for (body, says) in bad {
        let (status, answer) = s.api.call("PATCH", "/v1/account", Some(body.clone())).await;
        assert!(
            (400..500).contains(&status) && answer["message"].as_str().unwrap_or("").contains(says),
            "{body} → {status} {answer}"
        );
    }
    // Nothing of that was stored.
    let account = value(&s.api.client.account().await.unwrap());
    assert_eq!(
        (&account["ops_url"], &account["contact_email"]),
        (&Value::Null, &Value::Null),
        "{account}"
    );

    // Set, then removed: the secret goes with the URL.
    let set = s
        .api
        .client
        .update_account(&typed(
            json!({"ops_url": "https://shop.example/ops", "contact_email": "a@shop.example"}),
        ))
        .await
        .unwrap();
    assert!(set.ops_secret.is_some(), "{set:?}");
    let cleared = s
        .api
        .client
        .update_account(&typed(json!({"ops_url": null, "contact_email": null})))
        .await
        .unwrap();
    assert!(cleared.ops_secret.is_none(), "{cleared:?}");
    let cleared = value(&cleared);
    assert_eq!(
        (&cleared["ops_url"], &cleared["contact_email"]),
        (&Value::Null, &Value::Null)
    );
    let kxp_sender::Db::Sqlite(pool) = s.server.db() else {
        panic!("the test sender runs on SQLite")
    };
    let secret: Option<String> = sqlx::query_scalar("SELECT ops_secret FROM kxp_accounts")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(secret, None);
    s.server.shutdown().await;
}

#[tokio::test]
async fn a_notification_is_recorded_only_by_the_notifier_holding_its_lease() {
    let s = sender_with("0s,10ms", |_| {}).await;
    let db = s.server.db();
    let (ep, _) = s.api.endpoint("http://127.0.0.1:9/hook", json!({})).await;
    let kxp_sender::Db::Sqlite(pool) = db else {
        panic!("the test sender runs on SQLite")
    };
    let account: String = sqlx::query_scalar("SELECT id FROM kxp_accounts")
        .fetch_one(pool)
        .await
        .unwrap();
    for (id, channel) in [("ntf_a", "email"), ("ntf_b", "webhook")] {
        sqlx::query(
            "INSERT INTO kxp_notifications (id, account_id, endpoint_id, kind, channel, target, event_id, \
             payload, status, attempts, next_attempt_at, created_at, updated_at) \
             VALUES ($1, $2, $3, 'endpoint.disabled', $4, 'x', 'e', '{}', 'pending', 0, 0, 0, 0)",
        )
        .bind(id)
        .bind(&account)
        .bind(&ep)
        .bind(channel)
        .execute(pool)
        .await
        .unwrap();
    }
    // The server's own notifier may take the webhook row first; stop it.
    let url = s.database_url.clone();
    s.server.shutdown().await;
    let db = kxp_sender::Db::connect(&url).await.unwrap();
    let kxp_sender::Db::Sqlite(pool) = &db else {
        unreachable!()
    };
    sqlx::query("UPDATE kxp_notifications SET status = 'pending', lease_until = NULL, lease_owner = NULL, attempts = 0")
        .execute(pool)
        .await
        .unwrap();

    // Without a mailer, only the webhook row is claimed.
    let a = db
        .claim_notification("a", 60_000, false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.id, "ntf_b");
    assert!(
        db.claim_notification("a", 60_000, false)
            .await
            .unwrap()
            .is_none()
    );
    // Leased: nobody else gets it; a notifier that lost the lease records nothing.
    assert!(
        db.claim_notification("b", 60_000, true)
            .await
            .unwrap()
            .is_some_and(|n| n.id == "ntf_a")
    );
    db.finish_notification(&a, "b", 1, NoticeNext::Sent, None)
        .await
        .unwrap();
    let status = async |id: &str| -> String {
        sqlx::query_scalar("SELECT status FROM kxp_notifications WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap()
    };
    assert_eq!(status("ntf_b").await, "pending");
    db.finish_notification(&a, "a", 1, NoticeNext::Sent, None)
        .await
        .unwrap();
    assert_eq!(status("ntf_b").await, "sent");
    db.close().await;
}
