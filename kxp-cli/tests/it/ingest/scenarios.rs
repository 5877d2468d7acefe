//! What every broker runs the same way: consumption across kills, bad messages set aside and
//! counted, a full backlog that pauses consumption.

use super::*;

/// `total` messages published all along while `processes` senders consume them and are
/// SIGKILLed `kills` times mid-consumption (each time once the receiver has got some more) and
/// restarted; then a last start finishes the work, and every message must be one event.
pub(super) async fn kill_loop(broker: Broker<'_>, database_url: &str, s: &Setup, processes: usize) {
    const TOTAL: usize = 1000;
    const KILLS: usize = 5;
    /// How far the publisher runs ahead of what the receiver has got.
    const AHEAD: usize = 200;
    let args = ingest(&[broker.ingest_url(&s.account)]);
    let inbox = &s.inbox;

    let publishing = async {
        for n in 0..TOTAL {
            let start = Instant::now();
            while n >= inbox.distinct_n() + AHEAD {
                assert!(
                    start.elapsed() < PATIENCE,
                    "no progress: {} of {n} published messages arrived",
                    inbox.distinct_n()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            broker.publish(n).await;
        }
    };
    let killing = async {
        for round in 0..KILLS {
            let mut servers = Vec::new();
            for _ in 0..processes {
                servers.push(start(database_url, &args, &s.logs).await);
            }
            let target = (inbox.distinct_n() + 60 + 25 * round).min(TOTAL);
            wait_for(
                PATIENCE,
                move || async move { inbox.distinct_n() >= target },
                || {
                    format!(
                        "kill round {round}: the receiver has {} distinct messages, waiting for {target}",
                        inbox.distinct_n()
                    )
                },
            )
            .await;
            for server in servers {
                kill(server).await;
            }
        }
        let mut survivors = Vec::new();
        for _ in 0..processes {
            survivors.push(start(database_url, &args, &s.logs).await);
        }
        survivors
    };
    let ((), survivors) = tokio::join!(publishing, killing);

    wait_all_consumed(broker, inbox, TOTAL).await;
    assert_one_event_per_message(database_url, inbox, TOTAL).await;
    let mut created = 0.0;
    for server in &survivors {
        let health = wait_source(&server.base, &broker.source(), "up").await;
        assert!(
            health["last_error"].is_null() || health["last_error"].is_string(),
            "{health}"
        );
        created += metric(
            &metrics(&server.base).await,
            "kxp_ingest_messages_total",
            &[("source", &broker.source())],
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "{}: {TOTAL} messages, one event each after {KILLS} kills of {processes} process(es); \
         {} deliveries; the last start ingested {created} messages",
        broker.source(),
        inbox.deliveries.load(Ordering::SeqCst),
    );
    drop(survivors);
}

/// A message the sender must set aside: its body, its headers, the reason it is rejected for.
pub(super) struct Bad {
    pub(super) body: Vec<u8>,
    pub(super) message_id: Option<&'static str>,
    pub(super) headers: Vec<(&'static str, &'static str)>,
    pub(super) reason: &'static str,
}

/// `--max-event-bytes` of the bad-message tests.
pub(super) const MAX_EVENT_BYTES: usize = 4096;

/// The bad messages of `broker`. RabbitMQ also gets a message reusing message 0's id with
/// another body (on NATS, the stream itself drops a second `Nats-Msg-Id` within its duplicate
/// window, so the sender never sees one).
pub(super) fn bad_messages(broker: Broker<'_>) -> Vec<Bad> {
    let mut bad = vec![
        Bad {
            body: br#"{"type": "test.ingested", "data": {"n": 100}"#.to_vec(),
            headers: vec![],
            reason: "invalid_json",
            message_id: None,
        },
        Bad {
            body: br#"{"data": {"n": 101}}"#.to_vec(),
            headers: vec![],
            reason: "invalid_request",
            message_id: None,
        },
        Bad {
            body: json!({"type": EVENT_TYPE, "data": {"n": 102}})
                .to_string()
                .into_bytes(),
            headers: vec![("x-kxp-account", UNKNOWN_ACCOUNT)],
            reason: "unknown_account",
            message_id: None,
        },
        Bad {
            body:
                json!({"type": EVENT_TYPE, "data": {"n": 103, "pad": "x".repeat(MAX_EVENT_BYTES)}})
                    .to_string()
                    .into_bytes(),
            headers: vec![],
            reason: "payload_too_large",
            message_id: None,
        },
        // Longer than any request the API reads, and not JSON: refused by its length before
        // anything parses it (parsed first, it would be `invalid_json`).
        Bad {
            body: format!(
                r#"{{"type": "test.ingested", "data": {{"n": 105, "pad": "{}"#,
                "x".repeat(MAX_EVENT_BYTES + kxp_sender::REQUEST_OVERHEAD)
            )
            .into_bytes(),
            headers: vec![],
            reason: "payload_too_large",
            message_id: None,
        },
    ];
    if let Broker::Rabbit(_) = broker {
        bad.push(Bad {
            body: json!({"type": EVENT_TYPE, "data": {"n": 104}})
                .to_string()
                .into_bytes(),
            headers: vec![],
            reason: "idempotency_key_reused",
            message_id: Some("msg-0"),
        });
    }
    bad
}

/// Publishes good messages 0..5 with the bad ones between them; message 3 names its account
/// (the URL's) in `x-kxp-account`. Returns each bad message's NATS stream sequence (RabbitMQ: 0).
pub(super) async fn publish_good_and_bad(
    broker: Broker<'_>,
    account: &str,
    bad: &[Bad],
) -> Vec<u64> {
    let mut sequences = Vec::new();
    for n in 0..5 {
        let id = message_id(n);
        let own: &[(&str, &str)] = if n == 3 {
            &[("x-kxp-account", account)]
        } else {
            &[]
        };
        match broker {
            Broker::Rabbit(rabbit) => {
                rabbit
                    .publish_with_headers(&body(n), id.as_deref(), own)
                    .await
            }
            Broker::Nats(nats) => {
                let mut headers = own.to_vec();
                if let Some(id) = &id {
                    headers.push(("Nats-Msg-Id", id));
                }
                nats.publish_with_headers(&body(n), &headers).await;
            }
        }
        if let Some(bad) = bad.get(n) {
            sequences.push(match broker {
                Broker::Rabbit(rabbit) => {
                    rabbit
                        .publish_with_headers(&bad.body, bad.message_id, &bad.headers)
                        .await;
                    0
                }
                Broker::Nats(nats) => nats.publish_with_headers(&bad.body, &bad.headers).await,
            });
        }
    }
    sequences
}

pub(super) async fn assert_rejections_counted(base: &str, source: &str, bad: &[Bad]) {
    let text = metrics(base).await;
    let mut by_reason: BTreeMap<&str, f64> = BTreeMap::new();
    for bad in bad {
        *by_reason.entry(bad.reason).or_default() += 1.0;
    }
    for (reason, count) in by_reason {
        assert_eq!(
            metric(
                &text,
                "kxp_ingest_rejected_total",
                &[("source", source), ("reason", reason)]
            ),
            count,
            "kxp_ingest_rejected_total{{reason=\"{}\"}}: {}",
            reason,
            text.lines()
                .filter(|l| l.contains("kxp_ingest"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert_eq!(
        metric(&text, "kxp_ingest_rejected_total", &[("source", source)]),
        bad.len() as f64,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        metric(
            &text,
            "kxp_ingest_messages_total",
            &[("source", source), ("outcome", "created")]
        ),
        5.0,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// With `--backlog-limit 5` and a receiver that holds every request, consumption pauses with
/// messages still in the broker and none rejected; released, all 100 become events.
pub(super) async fn backpressure(broker: Broker<'_>, extra_query: &str) {
    const TOTAL: usize = 100;
    let db = SqliteFile::new("kxp.db");
    // Attempts wait on the held receiver instead of timing out (a failing endpoint's circuit
    // would open, and held deliveries do not count in the backlog).
    let s = setup(db.url(), 30_000).await;
    s.inbox.hold();
    let url = format!("{}{extra_query}", broker.ingest_url(&s.account));
    let mut args = ingest(&[url]);
    args.extend(["--backlog-limit".to_owned(), "5".to_owned()]);
    let serve = start(db.url(), &args, &s.logs).await;
    let source = broker.source();
    wait_source(&serve.base, &source, "up").await;
    for n in 0..TOTAL {
        broker.publish(n).await;
    }

    // Paused: the count of ingested messages stops growing while the broker still holds some.
    let start_at = Instant::now();
    let (mut last, mut steady) = (-1.0, 0);
    let (created, holding, text) = loop {
        let text = metrics(&serve.base).await;
        let created = metric(&text, "kxp_ingest_messages_total", &[("source", &source)]);
        let holding = broker.holding().await;
        steady = if created == last && created >= 5.0 && holding > 0 {
            steady + 1
        } else {
            0
        };
        if steady >= 3 {
            break (created, holding, text);
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "consumption did not pause at the backlog limit: {created} messages ingested, the \
             broker holds {holding}, the receiver holds {} requests",
            s.inbox.waiting.load(Ordering::SeqCst)
        );
        last = created;
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        created < TOTAL as f64,
        "{created} messages ingested: no backpressure"
    );
    assert!(holding > 0);
    assert_eq!(
        metric(&text, "kxp_ingest_rejected_total", &[("source", &source)]),
        0.0,
        "messages were rejected under backpressure: {}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    if let Broker::Rabbit(rabbit) = broker {
        assert!(rabbit.dead_letters().await.is_empty());
    }
    let _ = writeln!(
        std::io::stderr(),
        "{source}: paused at {created} ingested with {holding} in the broker and {} requests held",
        s.inbox.waiting.load(Ordering::SeqCst)
    );

    s.inbox.release();
    wait_all_consumed(broker, &s.inbox, TOTAL).await;
    assert_one_event_per_message(db.url(), &s.inbox, TOTAL).await;
    let text = metrics(&serve.base).await;
    assert_eq!(
        metric(&text, "kxp_ingest_rejected_total", &[("source", &source)]),
        0.0,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    drop(serve);
}

/// A message carries its producer's W3C trace context in `traceparent` and `tracestate`
/// headers, as a request does: stored with its event; an invalid `traceparent` is ignored (and
/// its `tracestate` with it), the message taken all the same.
pub(super) async fn trace_context_is_stored_with_the_event(broker: Broker<'_>) {
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let serve = start(db.url(), &ingest(&[broker.ingest_url(&s.account)]), &s.logs).await;
    wait_source(&serve.base, &broker.source(), "up").await;
    broker
        .publish_with(
            0,
            &[("traceparent", traceparent), ("tracestate", "producer=1")],
        )
        .await;
    broker
        .publish_with(
            1,
            &[
                ("traceparent", &traceparent.to_uppercase()),
                ("tracestate", "producer=2"),
            ],
        )
        .await;
    wait_all_consumed(broker, &s.inbox, 2).await;
    let stored = stored_trace_contexts(db.url()).await;
    assert_eq!(
        stored.get(&0),
        Some(&(Some(traceparent.to_owned()), Some("producer=1".to_owned())))
    );
    assert_eq!(stored.get(&1), Some(&(None, None)));
    kill(serve).await;
}
