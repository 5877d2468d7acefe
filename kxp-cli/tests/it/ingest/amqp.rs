//! `kxp serve --ingest amqp://…`: a RabbitMQ queue.

use super::scenarios::*;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_messages_become_one_event_each_across_kills_on_sqlite() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    kill_loop(Broker::Rabbit(&rabbit), db.url(), &s, 1).await;
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_two_processes_on_postgresql_compete_and_make_one_event_each_across_kills() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(database) = PgDatabase::create("kxp_ingest_rabbit").await else {
        return;
    };
    let s = setup(database.url(), 1000).await;

    // Two processes on one queue are two consumers of it.
    let url = rabbit.ingest_url(&s.account);
    let a = start(database.url(), &ingest(std::slice::from_ref(&url)), &s.logs).await;
    let b = start(database.url(), &ingest(std::slice::from_ref(&url)), &s.logs).await;
    wait_source(&a.base, &rabbit.source_name(), "up").await;
    wait_source(&b.base, &rabbit.source_name(), "up").await;
    let connections = rabbit.kxp_connections().await;
    for server in [&a, &b] {
        let name = format!("kxp serve {} pid {}", rabbit.source_name(), server.pid());
        assert!(
            connections.iter().any(|c| c.contains(&name)),
            "no connection named {name:?}: {connections:#?}"
        );
    }
    kill(a).await;
    kill(b).await;

    kill_loop(Broker::Rabbit(&rabbit), database.url(), &s, 2).await;
    rabbit.delete().await;
    database.drop().await;
}

/// The same two processes with `kxp serve` on a Citus cluster (issue 31).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_two_processes_on_citus_make_one_event_each_across_kills() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(database) = CitusDatabase::create("kxp_ingest_citus").await else {
        return;
    };
    let s = setup(database.url(), 1000).await;
    kill_loop(Broker::Rabbit(&rabbit), database.url(), &s, 2).await;
    rabbit.delete().await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_bad_messages_go_to_the_dead_letter_queue_and_are_counted_by_reason() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let url = format!("{}&account_header=allow", rabbit.ingest_url(&s.account));
    let mut args = ingest(&[url]);
    args.extend(["--max-event-bytes".to_owned(), MAX_EVENT_BYTES.to_string()]);
    let serve = start(db.url(), &args, &s.logs).await;
    wait_source(&serve.base, &rabbit.source_name(), "up").await;

    let bad = bad_messages(Broker::Rabbit(&rabbit));
    let (reuse, others) = bad.split_last().unwrap();
    publish_good_and_bad(Broker::Rabbit(&rabbit), &s.account, others).await;
    wait_all_consumed(Broker::Rabbit(&rabbit), &s.inbox, 5).await;
    // Message 0's id again with another body, once message 0 is in: which of two messages with
    // one id comes first decides which one is refused, and a consumer may take messages out of
    // order (a redelivery), so the test publishes it only after.
    rabbit
        .publish_with_headers(&reuse.body, reuse.message_id, &reuse.headers)
        .await;
    // The same messages again, one with its own id and one without: no new event.
    rabbit.publish(&body(1), None).await;
    rabbit.publish(&body(2), Some("msg-2")).await;
    wait_all_consumed(Broker::Rabbit(&rabbit), &s.inbox, 5).await;
    let start_at = Instant::now();
    let dead = loop {
        let dead = rabbit.dead_letters().await;
        if dead.len() >= bad.len() {
            break dead;
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "the dead-letter queue {} got {} of the {} bad messages",
            rabbit.dead_letter_queue(),
            dead.len(),
            bad.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let got: BTreeSet<&[u8]> = dead.iter().map(|m| m.body.as_slice()).collect();
    let want: BTreeSet<&[u8]> = bad.iter().map(|b| b.body.as_slice()).collect();
    assert_eq!(got, want, "the dead-letter queue holds other messages");
    assert_eq!(
        dead.len(),
        bad.len(),
        "a bad message was dead-lettered twice"
    );
    let unknown = dead.iter().find(|m| m.body == bad[2].body).unwrap();
    assert_eq!(
        unknown.headers.get("x-kxp-account").map(String::as_str),
        Some(UNKNOWN_ACCOUNT)
    );
    assert!(
        unknown
            .headers
            .get("x-first-death-reason")
            .map(String::as_str)
            == Some("rejected"),
        "dead-lettered by a reject: {:?}",
        unknown.headers
    );

    let reused = dead.iter().find(|m| m.body == reuse.body).unwrap();
    assert_eq!(reused.message_id.as_deref(), Some("msg-0"), "{reused:?}");

    assert_rejections_counted(&serve.base, &rabbit.source_name(), &bad).await;
    let text = metrics(&serve.base).await;
    assert_eq!(
        metric(
            &text,
            "kxp_ingest_messages_total",
            &[("source", &rabbit.source_name()), ("outcome", "replayed")]
        ),
        2.0,
        "{}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_one_event_per_message(db.url(), &s.inbox, 5).await;
    assert_eq!(
        rabbit.queue_counts().await,
        (0, 0),
        "nothing went back to the queue"
    );
    drop(serve);
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_connection_closed_by_the_broker_reconnects_and_loses_nothing() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let broker = Broker::Rabbit(&rabbit);
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let serve = start(db.url(), &ingest(&[rabbit.ingest_url(&s.account)]), &s.logs).await;
    wait_source(&serve.base, &rabbit.source_name(), "up").await;

    for n in 0..50 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 50).await;
    let closed = rabbit.close_kxp_connections().await;
    assert!(
        closed >= 1,
        "no connection of kxp serve for {}: {:#?}",
        rabbit.queue(),
        rabbit.kxp_connections().await
    );
    for n in 50..100 {
        broker.publish(n).await;
    }
    wait_all_consumed(broker, &s.inbox, 100).await;
    assert_one_event_per_message(db.url(), &s.inbox, 100).await;

    wait_source(&serve.base, &rabbit.source_name(), "up").await;
    let text = metrics(&serve.base).await;
    let source = rabbit.source_name();
    let reconnects = metric(&text, "kxp_ingest_reconnects_total", &[("source", &source)]);
    assert!(
        reconnects >= 1.0,
        "kxp_ingest_reconnects_total is {reconnects}: {}",
        text.lines()
            .filter(|l| l.contains("kxp_ingest"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        metric(&text, "kxp_ingest_source_up", &[("source", &source)]),
        1.0
    );
    drop(serve);
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_a_full_backlog_pauses_consumption_without_rejecting() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    backpressure(Broker::Rabbit(&rabbit), "&prefetch=10").await;
    rabbit.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_a_messages_trace_context_is_stored_with_its_event() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    trace_context_is_stored_with_the_event(Broker::Rabbit(&rabbit)).await;
    rabbit.delete().await;
}
