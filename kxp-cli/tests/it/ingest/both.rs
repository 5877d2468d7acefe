//! Sources on both brokers in one sender: configuration, queues and streams that do not exist
//! yet, and the account rules every broker applies alike.

use super::*;

/// Waits until both brokers hold nothing and the receiver has every `n` below `count`.
async fn wait_both_consumed(rabbit: &Rabbit, nats: &Nats, inbox: &Inbox, count: usize) {
    wait_for(
        PATIENCE,
        move || async move {
            inbox.distinct_n() >= count
                && Broker::Rabbit(rabbit).settled().await
                && Broker::Nats(nats).settled().await
        },
        || format!("{} of {count} messages arrived", inbox.distinct_n()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_come_from_kxp_ingest_and_from_the_config_file() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let urls = [
        rabbit.ingest_url(&s.account),
        nats.ingest_url(DURABLE, &s.account),
    ];
    let names = [rabbit.source_name(), nats.source_name(DURABLE)];

    // KXP_INGEST: several URLs separated by whitespace.
    let env = format!("{}\n  {}", urls[0], urls[1]);
    let serve = start_with_env(db.url(), &[], &[("KXP_INGEST", &env)], &s.logs).await;
    for name in &names {
        let health = wait_source(&serve.base, name, "up").await;
        assert!(
            health["lag"].is_u64() || health["lag"].is_null(),
            "{health}"
        );
        assert!(
            health["last_error"].is_null() || health["last_error"].is_string(),
            "{health}"
        );
    }
    for n in 0..10 {
        Broker::Rabbit(&rabbit).publish(n).await;
        Broker::Nats(&nats).publish(n + 10).await;
    }
    wait_both_consumed(&rabbit, &nats, &s.inbox, 20).await;
    kill(serve).await;

    // The file's `ingest = [..]`.
    let file = db.dir().join("kxp.toml");
    std::fs::write(&file, format!("ingest = [{:?}, {:?}]\n", urls[0], urls[1])).unwrap();
    let config = ["--config".to_owned(), file.display().to_string()];
    let serve = start(db.url(), &config, &s.logs).await;
    for name in &names {
        wait_source(&serve.base, name, "up").await;
    }
    for n in 20..30 {
        Broker::Rabbit(&rabbit).publish(n).await;
        Broker::Nats(&nats).publish(n + 10).await;
    }
    wait_both_consumed(&rabbit, &nats, &s.inbox, 40).await;
    assert_one_event_per_message(db.url(), &s.inbox, 40).await;
    let text = metrics(&serve.base).await;
    for name in &names {
        assert_eq!(
            metric(&text, "kxp_ingest_source_up", &[("source", name)]),
            1.0,
            "{name}: {}",
            text.lines()
                .filter(|l| l.contains("kxp_ingest"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_or_stream_is_down_until_it_exists_then_consumed() {
    let Some(rabbit) = Rabbit::connect_undeclared("kxp-test").await else {
        return;
    };
    if Nats::connect().await.map(drop).is_none() {
        return;
    }
    let nats = Nats::connect_undeclared(kxp_testkit::brokers::NATS_URL).await;
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let urls = [
        rabbit.ingest_url(&s.account),
        nats.ingest_url(DURABLE, &s.account),
    ];
    let names = [rabbit.source_name(), nats.source_name(DURABLE)];
    // Neither exists: the sender still starts (the API serves), and says why each is down.
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    for name in &names {
        let health = wait_source(&serve.base, name, "down").await;
        assert!(
            health["last_error"].as_str().is_some_and(|e| !e.is_empty()),
            "{health}"
        );
    }
    let text = metrics(&serve.base).await;
    for name in &names {
        assert_eq!(
            metric(&text, "kxp_ingest_source_up", &[("source", name)]),
            0.0,
            "{name}"
        );
    }

    // Once they exist, the sources come up by themselves (kxp never declares the queue).
    rabbit.declare().await;
    nats.declare().await;
    for name in &names {
        wait_source(&serve.base, name, "up").await;
    }
    for n in 0..5 {
        Broker::Rabbit(&rabbit).publish(n).await;
        Broker::Nats(&nats).publish(n + 5).await;
    }
    wait_both_consumed(&rabbit, &nats, &s.inbox, 10).await;
    assert_one_event_per_message(db.url(), &s.inbox, 10).await;
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}

/// Creates an account on the sender's database with `kxp accounts create`; its id.
async fn create_account(database_url: &str, name: &str) -> String {
    crate::accounts::create_account(database_url, name).await.0
}

/// The `data.n` of the events of the sender's database, by account.
async fn events_by_account(database_url: &str) -> BTreeMap<String, BTreeSet<u64>> {
    let query = "SELECT account_id, payload FROM kxp_events";
    let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as(query).fetch_all(&pool).await.unwrap();
    pool.close().await;
    let mut by_account: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for (account, payload) in rows {
        let envelope: Value = serde_json::from_str(&payload).unwrap();
        by_account
            .entry(account)
            .or_default()
            .insert(envelope["data"]["n"].as_u64().unwrap());
    }
    by_account
}

/// `account_header=allow:<acc>` on both brokers: a message that names an account of the list
/// or the URL's own (or none: the URL's) becomes that account's event; one that names another
/// account, existing or not, is rejected as `account_not_allowed`; a header that is not one
/// string (an AMQP integer, table or byte array, a NATS header given twice) is rejected as
/// `invalid_request`, never taken for the URL's account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_allow_list_limits_what_the_header_may_name_on_both_brokers() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    let listed = create_account(db.url(), "Listed").await;
    let other = create_account(db.url(), "Other").await;
    let allow = format!("&account_header=allow:{listed}");
    let urls = [
        format!("{}{allow}", rabbit.ingest_url(&s.account)),
        format!("{}{allow}", nats.ingest_url(DURABLE, &s.account)),
    ];
    let mut rejected = nats.subscribe(&nats.rejected_subject()).await;
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    let (amqp, js) = (rabbit.source_name(), nats.source_name(DURABLE));
    wait_source(&serve.base, &amqp, "up").await;
    wait_source(&serve.base, &js, "up").await;

    let rabbit_good: [(usize, Vec<(&str, AmqpHeader<'_>)>); 3] = [
        (0, vec![]),
        (1, vec![("x-kxp-account", AmqpHeader::Text(&s.account))]),
        (2, vec![("x-kxp-account", AmqpHeader::Text(&listed))]),
    ];
    for (n, headers) in &rabbit_good {
        rabbit
            .publish_with_typed_headers(&body(*n), None, headers)
            .await;
    }
    let rabbit_bad: [(usize, AmqpHeader<'_>, &str); 5] = [
        (10, AmqpHeader::Text(&other), "account_not_allowed"),
        (11, AmqpHeader::Text(UNKNOWN_ACCOUNT), "account_not_allowed"),
        (12, AmqpHeader::Integer(7), "invalid_request"),
        (13, AmqpHeader::Table(&[("id", "acc_x")]), "invalid_request"),
        (14, AmqpHeader::Bytes(b"acc_x"), "invalid_request"),
    ];
    for (n, header, _) in &rabbit_bad {
        rabbit
            .publish_with_typed_headers(&body(*n), None, &[("x-kxp-account", *header)])
            .await;
    }
    nats.publish_with_headers(&body(3), &[]).await;
    nats.publish_with_headers(&body(4), &[("X-Kxp-Account", &listed)])
        .await;
    let other_seq = nats
        .publish_with_headers(&body(20), &[("x-kxp-account", &other)])
        .await;
    let twice = [
        ("x-kxp-account", s.account.as_str()),
        ("x-kxp-account", &listed),
    ];
    let twice_seq = nats.publish_with_headers(&body(21), &twice).await;

    let start_at = Instant::now();
    let dead = loop {
        let dead = rabbit.dead_letters().await;
        if dead.len() >= rabbit_bad.len() {
            break dead;
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "the dead-letter queue got {} of {} messages",
            dead.len(),
            rabbit_bad.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let dead: BTreeSet<Vec<u8>> = dead.into_iter().map(|m| m.body).collect();
    let want: BTreeSet<Vec<u8>> = rabbit_bad.iter().map(|(n, _, _)| body(*n)).collect();
    assert_eq!(dead, want);
    let mut reasons = BTreeMap::new();
    for _ in 0..2 {
        let message = rejected
            .next_within(PATIENCE)
            .await
            .unwrap_or_else(|| panic!("no rejection on the rejected subject: {reasons:?}"));
        reasons.insert(
            message
                .header("Kxp-Source-Sequence")
                .unwrap_or("")
                .to_owned(),
            message.header("Kxp-Reject-Reason").unwrap_or("").to_owned(),
        );
    }
    assert_eq!(
        reasons,
        BTreeMap::from([
            (other_seq.to_string(), "account_not_allowed".to_owned()),
            (twice_seq.to_string(), "invalid_request".to_owned()),
        ])
    );

    wait_both_consumed(&rabbit, &nats, &s.inbox, 0).await;
    let text = metrics(&serve.base).await;
    for (source, reason, count) in [
        (&amqp, "account_not_allowed", 2.0),
        (&amqp, "invalid_request", 3.0),
        (&js, "account_not_allowed", 1.0),
        (&js, "invalid_request", 1.0),
    ] {
        assert_eq!(
            metric(
                &text,
                "kxp_ingest_rejected_total",
                &[("source", source), ("reason", reason)]
            ),
            count,
            "{source} {reason}: {}",
            text.lines()
                .filter(|l| l.contains("kxp_ingest_rejected"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert_eq!(
        events_by_account(db.url()).await,
        BTreeMap::from([
            (s.account.clone(), BTreeSet::from([0, 1, 3])),
            (listed.clone(), BTreeSet::from([2, 4])),
        ])
    );
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_without_an_account_or_against_the_schema_are_rejected_on_both_brokers() {
    let Some(rabbit) = Rabbit::connect().await else {
        return;
    };
    let Some(nats) = Nats::connect().await else {
        return;
    };
    let db = SqliteFile::new("kxp.db");
    let s = setup(db.url(), 1000).await;
    // No `account` in the URLs: each message must name its own.
    let rejected_subject = format!("{}.rejected", nats.subject());
    let mut rejected = nats.subscribe(&rejected_subject).await;
    let urls = [
        format!(
            "{}?queue={}&account_header=allow",
            kxp_testkit::brokers::RABBIT_URL,
            rabbit.queue()
        ),
        format!(
            "{}?stream={}&subject={}&durable={DURABLE}&account_header=allow&rejected_subject={rejected_subject}",
            nats.url(),
            nats.stream(),
            nats.subject()
        ),
    ];
    let serve = start(db.url(), &ingest(&urls), &s.logs).await;
    let (amqp, js) = (rabbit.source_name(), nats.source_name(DURABLE));
    wait_source(&serve.base, &amqp, "up").await;
    wait_source(&serve.base, &js, "up").await;
    let client = kxp_api::Client::new(&serve.base, KEY).unwrap();
    let version = client.account().await.unwrap().default_api_version;
    let schema = json!({
        "type": "object",
        "required": ["n"],
        "properties": {"n": {"type": "integer"}}
    });
    client
        .put_schema(EVENT_TYPE, &version, &schema)
        .await
        .unwrap();

    let own = [("x-kxp-account", s.account.as_str())];
    let nameless = body(900);
    let against = json!({"type": EVENT_TYPE, "data": {"n": "nine hundred"}})
        .to_string()
        .into_bytes();
    rabbit.publish_with_headers(&body(0), None, &own).await;
    rabbit.publish_with_headers(&nameless, None, &[]).await;
    rabbit.publish_with_headers(&against, None, &own).await;
    rabbit
        .publish_with_headers(&body(1), Some("msg-1"), &own)
        .await;
    nats.publish_with_headers(&body(2), &own).await;
    let nameless_seq = nats.publish_with_headers(&nameless, &[]).await;
    let against_seq = nats.publish_with_headers(&against, &own).await;
    nats.publish_with_headers(&body(3), &[own[0], ("Nats-Msg-Id", "msg-3")])
        .await;

    wait_both_consumed(&rabbit, &nats, &s.inbox, 4).await;
    let start_at = Instant::now();
    let dead = loop {
        let dead = rabbit.dead_letters().await;
        if dead.len() >= 2 {
            break dead;
        }
        assert!(
            start_at.elapsed() < PATIENCE,
            "the dead-letter queue got {} of 2 messages",
            dead.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let bodies: BTreeSet<&[u8]> = dead.iter().map(|m| m.body.as_slice()).collect();
    assert_eq!(
        bodies,
        BTreeSet::from([nameless.as_slice(), against.as_slice()])
    );
    let mut reasons = BTreeMap::new();
    for _ in 0..2 {
        let message = rejected
            .next_within(PATIENCE)
            .await
            .unwrap_or_else(|| panic!("no rejection on {rejected_subject}: {reasons:?}"));
        reasons.insert(
            message
                .header("Kxp-Source-Sequence")
                .unwrap_or("")
                .to_owned(),
            (
                message.header("Kxp-Reject-Reason").unwrap_or("").to_owned(),
                message.body,
            ),
        );
    }
    assert_eq!(
        reasons,
        BTreeMap::from([
            (
                nameless_seq.to_string(),
                ("account_required".to_owned(), nameless.clone())
            ),
            (
                against_seq.to_string(),
                ("schema_violation".to_owned(), against.clone())
            ),
        ])
    );

    let text = metrics(&serve.base).await;
    for source in [&amqp, &js] {
        for reason in ["account_required", "schema_violation"] {
            assert_eq!(
                metric(
                    &text,
                    "kxp_ingest_rejected_total",
                    &[("source", source), ("reason", reason)]
                ),
                1.0,
                "{source} {reason}: {}",
                text.lines()
                    .filter(|l| l.contains("kxp_ingest_rejected"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    assert_one_event_per_message(db.url(), &s.inbox, 4).await;
    drop(serve);
    rabbit.delete().await;
    nats.delete().await;
}
