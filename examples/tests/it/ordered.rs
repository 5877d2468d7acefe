//! The axum example in ordered mode, as a merchant runs it: the binary, a real sender in the
//! test's process, the settings in the environment. The testing aid `KXP_EXAMPLE_REFUSE` makes
//! its handler refuse one event, and the payment behind it waits in order until the handler
//! takes it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::binaries::{Bin, Running, TempDir, run_to_exit, sender, sqlite_payments};

/// Generous: a loaded 2-core CI machine runs this beside other test binaries.
const PATIENCE: Duration = Duration::from_secs(90);

/// The request lines the binary logged, as JSON.
fn requests(receiver: &Running) -> Vec<Value> {
    receiver
        .stdout()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == "webhook request")
        .collect()
}

async fn until(what: &str, mut ready: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !ready().await {
        assert!(start.elapsed() < PATIENCE, "{what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn emit(client: &kxp_api::Client, event_type: &str, key: &str, amount: i64) -> String {
    let event = kxp_api::NewEvent::new(event_type, &json!({"amount": amount, "currency": "eur"}))
        .unwrap()
        .ordering_key(key);
    client
        .create_event(&event, None)
        .await
        .unwrap()
        .id
        .into_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_example_in_ordered_mode_keeps_a_refused_payment_and_its_successors_in_order() {
    let sender_dir = TempDir::new();
    let (sender, base, client) = sender(&sender_dir).await;
    let new: kxp_api::NewEndpoint = serde_json::from_value(
        json!({"url": "http://127.0.0.1:9/webhooks", "skip_challenge": true}),
    )
    .unwrap();
    let created = client.create_endpoint(&new).await.unwrap();
    let endpoint = created.endpoint.id.as_str().to_owned();
    let secret = created.secret.unwrap().expose().to_owned();

    let dir = TempDir::new();
    let env = |refuse: Option<&'static str>| {
        let mut env = vec![
            ("KXP_WEBHOOK_SECRET", secret.clone()),
            ("KXP_ORDERED", "1".to_owned()),
            ("KXP_SENDER_URL", base.clone()),
            ("KXP_ENDPOINT_ID", endpoint.clone()),
        ];
        if let Some(refuse) = refuse {
            env.push(("KXP_EXAMPLE_REFUSE", refuse.to_owned()));
        }
        env
    };
    let start = |env: Vec<(&'static str, String)>| {
        let dir = dir.path().to_owned();
        async move {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            Running::start(Bin::Axum, &dir, &env).await
        }
    };
    let receiver = start(env(Some("payment.disputed"))).await;
    let patch: kxp_api::EndpointPatch = serde_json::from_value(
        json!({"url": format!("{}/webhooks", receiver.base), "skip_challenge": true}),
    )
    .unwrap();
    client
        .update_endpoint(&endpoint.as_str().into(), &patch)
        .await
        .unwrap();

    // A's dispute is refused by the handler, so A's payment waits behind it; B's goes through.
    let a_dispute = emit(&client, "payment.disputed", "pay_A", 1).await;
    let a_paid = emit(&client, "payment.succeeded", "pay_A", 2).await;
    let b_paid = emit(&client, "payment.succeeded", "pay_B", 3).await;
    let db = dir.default_database();
    until("B's payment is recorded", async || {
        sqlite_payments(&db).await.iter().any(|p| p.0 == b_paid)
    })
    .await;
    until("the refused dispute is logged", async || {
        requests(&receiver)
            .iter()
            .any(|r| r["event_id"] == a_dispute.as_str() && r["status"] == 500)
    })
    .await;
    // Each delivery is answered 200 without the handler: `held`, or `duplicate` when the
    // catch-up had already taken the event from the feed before its delivery arrived (a slow
    // sender on a loaded machine).
    for event in [&a_dispute, &a_paid, &b_paid] {
        until(&format!("{event} is held"), async || {
            requests(&receiver).iter().any(|r| {
                r["event_id"] == event.as_str()
                    && (r["outcome"] == "held" || r["outcome"] == "duplicate")
                    && r["status"] == 200
            })
        })
        .await;
    }
    let payments = sqlite_payments(&db).await;
    assert!(
        !payments.iter().any(|p| p.0 == a_paid),
        "A's payment overtook its dispute: {payments:?}"
    );
    // Two held (the dispute and A's payment) once the catch-up has released B's.
    until("two events held", async || {
        let health = reqwest::get(format!("{}/healthz/webhooks", receiver.base))
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        let health: Value = health.json().await.unwrap();
        health["endpoints"][0]["held"] == 2
    })
    .await;
    let metrics = reqwest::get(format!("{}/metrics/webhooks", receiver.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "kxp_catchup_held_events{{endpoint=\"{endpoint}\"}} 2"
        )),
        "{metrics}"
    );
    drop(receiver);

    // The handler fixed (no more refusals): the dispute, then A's payment, from the feed.
    let receiver = start(env(None)).await;
    until("A's payment is recorded", async || {
        sqlite_payments(&db).await.iter().any(|p| p.0 == a_paid)
    })
    .await;
    let logged = requests(&receiver);
    let turn = |event: &str| {
        logged
            .iter()
            .position(|r| r["event_id"] == event && r["outcome"] == "processed")
            .unwrap_or_else(|| panic!("{event} not processed: {logged:?}"))
    };
    assert!(turn(&a_dispute) < turn(&a_paid), "{logged:?}");
    assert_eq!(sqlite_payments(&db).await.len(), 2);
    drop(receiver);
    sender.shutdown().await;
}

#[tokio::test]
async fn ordered_mode_without_the_sender_url_exits_with_a_clear_message() {
    let dir = TempDir::new();
    let (status, stderr) = run_to_exit(
        Bin::Axum,
        dir.path(),
        &[
            ("KXP_WEBHOOK_SECRET", "whsec_example"),
            ("KXP_ORDERED", "1"),
            ("KXP_ENDPOINT_ID", "ep_1"),
        ],
    );
    assert!(!status.success(), "{status}");
    assert!(stderr.contains("KXP_SENDER_URL"), "stderr: {stderr}");
    let (status, stderr) = run_to_exit(
        Bin::Actix,
        dir.path(),
        &[
            ("KXP_WEBHOOK_SECRET", "whsec_example"),
            ("KXP_ORDERED", "1"),
            ("KXP_SENDER_URL", "http://127.0.0.1:9"),
            ("KXP_ENDPOINT_ID", "ep_1"),
        ],
    );
    assert!(!status.success(), "{status}");
    assert!(stderr.contains("axum example"), "stderr: {stderr}");
}
