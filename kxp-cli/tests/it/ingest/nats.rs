//! `kxp serve --ingest nats://…`: a NATS JetStream stream.

use super::scenarios::*;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_messages_become_one_event_each_across_kills_on_sqlite() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    kill_loop(Broker::Nats(&nats), db.url(), &s, 1).await;
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert_eq!((state.num_pending, state.num_ack_pending), (0, 0));
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_two_processes_on_postgresql_compete_and_make_one_event_each_across_kills() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let Some(database) = PgDatabase::create("kxp_ingest_nats").await else {
        return;
    };
    let s = setup(database.url(), 1000).await;
    kill_loop(Broker::Nats(&nats), database.url(), &s, 2).await;
    nats.delete().await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_bad_messages_go_to_the_rejected_subject_with_their_reason_and_are_terminated() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let mut rejected = nats.subscribe(&nats.rejected_subject()).await;
    let url = format!(
        "{}&account_header=allow",
        nats.ingest_url(DURABLE, &s.account)
    );
    let mut args = ingest(&[url]);
    args.extend(["--max-event-bytes".to_owned(), MAX_EVENT_BYTES.to_string()]);
    let serve = start(db.url(), &args, &s.logs).await;
    wait_source(&serve.base, &nats.source_name(DURABLE), "up").await;
    // The sender made the durable consumer: explicit acks, on the URL's subject.
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert!(
        state.explicit_ack && state.filter_subject == nats.subject(),
        "{state:?}"
    );

    let bad = bad_messages(Broker::Nats(&nats));
    let sequences = publish_good_and_bad(Broker::Nats(&nats), &s.account, &bad).await;
    let mut got = BTreeMap::new();
    let start_at = Instant::now();
    while got.len() < bad.len() {
        let left = PATIENCE.saturating_sub(start_at.elapsed());
        let Some(message) = rejected.next_within(left).await else {
            panic!(
                "{} of {} bad messages arrived on {} within {PATIENCE:?}: {got:#?}",
                got.len(),
                bad.len(),
                nats.rejected_subject()
            );
        };
        let sequence: u64 = message
            .header("Kxp-Source-Sequence")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no Kxp-Source-Sequence: {message:?}"));
        assert!(
            got.insert(sequence, message).is_none(),
            "message {sequence} was rejected twice"
        );
    }
    for (bad, sequence) in bad.iter().zip(&sequences) {
        let message = got
            .get(sequence)
            .unwrap_or_else(|| panic!("no rejection of sequence {sequence}: {got:#?}"));
        assert_eq!(message.body, bad.body, "{message:?}");
        assert_eq!(
            message.header("Kxp-Reject-Reason"),
            Some(bad.reason),
            "{message:?}"
        );
        assert!(
            message
                .header("Kxp-Reject-Detail")
                .is_some_and(|d| !d.is_empty()),
            "{message:?}"
        );
        assert_eq!(
            message.header("Kxp-Source-Stream"),
            Some(nats.stream()),
            "{message:?}"
        );
    }

    wait_all_consumed(Broker::Nats(&nats), &s.inbox, 5).await;
    assert_rejections_counted(&serve.base, &nats.source_name(DURABLE), &bad).await;
    assert_one_event_per_message(db.url(), &s.inbox, 5).await;
    // Terminated, not redelivered: nothing is pending, and no second rejection came.
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert_eq!(
        (
            state.num_pending,
            state.num_ack_pending,
            state.num_redelivered
        ),
        (0, 0, 0),
        "{state:?}"
    );
    nats.client().flush().await.unwrap();
    if let Some(again) = rejected.next_within(Duration::from_millis(500)).await {
        panic!("a rejected message was rejected again: {again:?}");
    }
    drop(serve);
    nats.delete().await;
}

/// Whether the durable consumer `durable` of `nats` has nothing left to hand out or settle.
async fn consumer_idle(nats: &Nats, durable: &str) -> bool {
    nats.consumer_state(durable)
        .await
        .is_some_and(|state| state.num_pending == 0 && state.num_ack_pending == 0)
}

/// `kxp_ingest_rejected_total{source, reason}` of the server at `base`.
async fn rejections(base: &str, source: &str, reason: &str) -> f64 {
    metric(
        &metrics(base).await,
        "kxp_ingest_rejected_total",
        &[("source", source), ("reason", reason)],
    )
}

/// A NATS source whose rejected subject is in its own filter would consume each of its rejects
/// again, reject it again and publish it again, forever: it does not start (down, the reason in
/// `/healthz`, no consumer made, no reconnects), while a source on the same stream whose filter
/// leaves the rejects out consumes as usual and rejects into the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_source_whose_rejects_fall_in_its_own_filter_does_not_start() {
    let Some(nats) = Nats::connect_capturing_prefix().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let prefix = nats.prefix();
    let looping = format!(
        "{}?stream={}&subject={prefix}.>&durable={DURABLE}&account={}&rejected_subject={prefix}.rejected",
        nats.url(),
        nats.stream(),
        s.account
    );
    const FINE: &str = "kxp-fine";
    let fine = format!(
        "{}&rejected_subject={prefix}.rejected",
        nats.ingest_url(FINE, &s.account)
    );
    let serve = start(db.url(), &ingest(&[looping, fine]), &s.logs).await;
    let refused = nats.source_name(DURABLE);
    let health = wait_source(&serve.base, &refused, "down").await;
    let error = health["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("{prefix}.rejected")) && error.contains("filter"),
        "{health}"
    );
    let consuming = nats.source_name(FINE);
    wait_source(&serve.base, &consuming, "up").await;

    nats.publish(b"not json", None).await;
    let (nats_ref, base) = (&nats, serve.base.as_str());
    wait_for(
        PATIENCE,
        move || async move {
            rejections(base, &nats_ref.source_name(FINE), "invalid_json").await >= 1.0
                && consumer_idle(nats_ref, FINE).await
        },
        || "the consuming source did not reject the bad message".to_owned(),
    )
    .await;
    // The message and its one reject, both in the stream; the refused source read neither.
    assert_eq!(nats.stream_messages().await, 2);
    assert_eq!(rejections(base, &consuming, "invalid_json").await, 1.0);
    assert_eq!(
        nats.consumer_state(DURABLE).await,
        None,
        "the refused source made its consumer"
    );
    let text = metrics(base).await;
    assert_eq!(
        metric(
            &text,
            "kxp_ingest_reconnects_total",
            &[("source", &refused)]
        ),
        0.0
    );
    assert_eq!(
        metric(&text, "kxp_ingest_source_up", &[("source", &refused)]),
        0.0
    );
    assert_eq!(
        source_health(base, &refused).await.unwrap()["state"],
        "down"
    );
    drop(serve);
    nats.delete().await;
}

/// Two NATS sources, each consuming the subject the other publishes its rejects to (neither's
/// rejects are in its own filter, so both start): a bad message rejected by the first is
/// consumed by the second, which finds `Kxp-Reject-Reason` on it and terminates it instead of
/// publishing it back. One rejection each, and the stream keeps the message and its one reject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_reject_consumed_again_is_terminated_not_published_again() {
    let Some(nats) = Nats::connect_capturing_prefix().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let rejects = format!("{}.rejected", nats.prefix());
    const A: &str = "kxp-a";
    const B: &str = "kxp-b";
    let source = |durable: &str, subject: &str, rejected: &str| {
        format!(
            "{}?stream={}&subject={subject}&durable={durable}&account={}&rejected_subject={rejected}",
            nats.url(),
            nats.stream(),
            s.account
        )
    };
    let urls = [
        source(A, nats.subject(), &rejects),
        source(B, &rejects, nats.subject()),
    ];
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    for durable in [A, B] {
        wait_source(&serve.base, &nats.source_name(durable), "up").await;
    }

    nats.publish(b"not json", None).await;
    let (nats_ref, base) = (&nats, serve.base.as_str());
    wait_for(
        PATIENCE,
        move || async move {
            rejections(base, &nats_ref.source_name(A), "invalid_json").await >= 1.0
                && rejections(base, &nats_ref.source_name(B), "invalid_json").await >= 1.0
                && consumer_idle(nats_ref, A).await
                && consumer_idle(nats_ref, B).await
        },
        || "the bad message did not come to rest".to_owned(),
    )
    .await;
    for durable in [A, B] {
        assert_eq!(
            rejections(base, &nats.source_name(durable), "invalid_json").await,
            1.0,
            "{durable}"
        );
    }
    assert_eq!(
        nats.stream_messages().await,
        2,
        "the reject was published again"
    );
    drop(serve);
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_server_restart_reconnects_and_loses_nothing() {
    let Some(mut server) = NatsServer::spawn() else {
        return;
    };
    let nats = Nats::connect_to(&server.url()).await;
    let broker = Broker::Nats(&nats);
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let serve = start(
        db.url(),
        &ingest(&[nats.ingest_url(DURABLE, &s.account)]),
        &s.logs,
    )
    .await;
    let source = nats.source_name(DURABLE);
    wait_source(&serve.base, &source, "up").await;

    for n in 0..50 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 50).await;

    server = tokio::task::spawn_blocking(move || {
        server.stop();
        server
    })
    .await
    .unwrap();
    // The sender notices (the state is not `up` while the server is away).
    let start_at = Instant::now();
    let noticed = loop {
        let health = source_health(&serve.base, &source).await;
        if health.as_ref().is_some_and(|h| h["state"] != "up") {
            break health;
        }
        if start_at.elapsed() > Duration::from_secs(30) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        noticed.is_some(),
        "/healthz still says {source} is up 30 s after the server stopped"
    );
    server = tokio::task::spawn_blocking(move || {
        server.start();
        server
    })
    .await
    .unwrap();
    nats.wait_connected(PATIENCE).await;

    for n in 50..100 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 100).await;
    assert_one_event_per_message(db.url(), &s.inbox, 100).await;
    wait_source(&serve.base, &source, "up").await;
    let text = metrics(&serve.base).await;
    let _ = writeln!(
        std::io::stderr(),
        "{source}: the server went away and came back; noticed as {noticed:?}; {}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    drop(serve);
    nats.delete().await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_full_backlog_pauses_consumption_without_rejecting() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    backpressure(Broker::Nats(&nats), "&prefetch=10").await;
    let state = nats.consumer_state(DURABLE).await.unwrap();
    assert_eq!(state.max_ack_pending, 10, "{state:?}");
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_messages_trace_context_is_stored_with_its_event() {
    let Some(nats) = Nats::connect().await else {
        return;
    };
    trace_context_is_stored_with_the_event(Broker::Nats(&nats)).await;
    nats.delete().await;
}
