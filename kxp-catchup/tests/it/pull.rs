//! The pull consumer against a real sender: items in order, each once; a handler failure stops
//! the poll at that item with nothing past it committed, and the next poll takes it again; an
//! event whose data is not the handler's type stops it by name.

use std::sync::{Arc, Mutex};

use kxp_catchup::{PullConsumer, PullError, Pulled};
use kxp_dedup::Store;
use kxp_verify::Secret;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
struct Payment {
    amount: i64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_consumer_processes_in_order_once_and_stops_at_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = crate::sender(dir.path()).await;
    let created = client
        .create_endpoint(&kxp_api::NewEndpoint::pull())
        .await
        .unwrap();
    let endpoint = created.endpoint.id.as_str().to_owned();
    let secret = Secret::new(created.secret.unwrap().expose()).unwrap();
    for amount in 1..=5 {
        let data = json!({"amount": amount});
        let event = kxp_api::NewEvent::new("payment.succeeded", &data).unwrap();
        client.create_event(&event, None).await.unwrap();
    }
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let base = format!("http://{}", server.addr());
    let consumer = PullConsumer::new(&base, &endpoint, secret, store)
        .unwrap()
        .with_wait(10)
        .with_page_size(10);

    // The handler refuses amount 3: 1 and 2 are processed and committed, 3 stops the poll.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = |refuse: Option<i64>| {
        let seen = seen.clone();
        move |pulled: Pulled<Payment>| {
            let seen = seen.clone();
            async move {
                if Some(pulled.event.data().amount) == refuse {
                    return Err("refused".to_owned());
                }
                seen.lock()
                    .unwrap()
                    .push((pulled.sequence, pulled.event.data().amount));
                Ok(())
            }
        }
    };
    let mut polled = None;
    while polled.is_none() {
        match consumer.poll(handler(Some(3))).await {
            Ok(p) if p.processed == 0 => continue,
            other => polled = Some(other),
        }
    }
    // The sequencer may have numbered the five in more than one pass: poll until the refusal.
    let mut result = polled.unwrap();
    while let Ok(p) = &result {
        assert!(p.cursor < 3, "{p:?}");
        result = consumer.poll(handler(Some(3))).await;
    }
    match result {
        Err(PullError::Handler {
            sequence, outcome, ..
        }) => {
            assert_eq!((sequence, outcome), (3, "failed"));
        }
        other => panic!("{other:?}"),
    }
    let cursor = client
        .endpoint_health(&endpoint.as_str().into())
        .await
        .unwrap()
        .pull
        .unwrap();
    assert_eq!(cursor.cursor, 2, "nothing past the failure is committed");

    // Fixed: the next poll starts at 3, and each amount was handled once, in order.
    let polled = consumer.poll(handler(None)).await.unwrap();
    assert_eq!(
        (polled.processed, polled.duplicates, polled.cursor),
        (3, 0, 5)
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]);

    // An event that is not a payment stops a payment handler by name, and is not committed.
    let event = kxp_api::NewEvent::new("payment.succeeded", &json!({"note": "no amount"})).unwrap();
    client.create_event(&event, None).await.unwrap();
    let mut result = consumer.poll(handler(None)).await;
    while matches!(result, Ok(p) if p.processed == 0 && p.cursor == 5) {
        result = consumer.poll(handler(None)).await;
    }
    match result {
        Err(error @ PullError::Rejected { sequence: 6, .. }) => {
            assert_eq!(error.code(), "rejected");
        }
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

/// An event erased on the sender (`POST /v1/erasures`) reads as `{"erased":true}` in the feed:
/// the consumer commits past it without calling the handler, and dedup records it done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_item_is_committed_past_without_the_handler() {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = crate::sender(dir.path()).await;
    let created = client
        .create_endpoint(&kxp_api::NewEndpoint::pull())
        .await
        .unwrap();
    let endpoint = created.endpoint.id.as_str().to_owned();
    let secret = Secret::new(created.secret.unwrap().expose()).unwrap();
    let mut erased = Vec::new();
    for amount in 1..=5 {
        let mut event =
            kxp_api::NewEvent::new("payment.succeeded", &json!({"amount": amount})).unwrap();
        if amount % 2 == 0 {
            event = event.tags(["customer:cus_9"]);
        }
        let id = client.create_event(&event, None).await.unwrap().id;
        if amount % 2 == 0 {
            erased.push(id.into_string());
        }
    }
    let erasure = client.create_erasure("customer:cus_9").await.unwrap();
    while client.erasure(&erasure.id).await.unwrap().status != kxp_api::ErasureStatus::Done {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let store = Store::connect("sqlite::memory:").await.unwrap();
    let base = format!("http://{}", server.addr());
    let consumer = PullConsumer::new(&base, &endpoint, secret, store.clone())
        .unwrap()
        .with_wait(10)
        .with_page_size(10);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut total = kxp_catchup::Polled::default();
    while total.cursor < 5 {
        let seen = seen.clone();
        let polled = consumer
            .poll(move |pulled: Pulled<Payment>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(pulled.event.data().amount);
                    Ok::<_, String>(())
                }
            })
            .await
            .unwrap();
        total.processed += polled.processed;
        total.gone += polled.gone;
        total.cursor = polled.cursor;
    }
    assert_eq!((total.processed, total.gone), (3, 2));
    assert_eq!(*seen.lock().unwrap(), vec![1, 3, 5]);
    for id in &erased {
        let record = store.record(id).await.unwrap().unwrap();
        assert_eq!(record.status, kxp_dedup::EventStatus::Done);
    }
    server.shutdown().await;
}
