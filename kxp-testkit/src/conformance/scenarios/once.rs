//! The scenarios about processing each event once, on the backend they are given.

use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::super::client::{deliver, delivery, outcome, send, try_send};
use super::super::{
    Config, Mode, Outage, ReceiverUnderTest, RunningReceiver, Signal, event_body,
    wait_for_open_transaction,
};
use super::*;
use crate::db::Backend;

// --- Once per event --------------------------------------------------------------------------

/// The first delivery is processed; the same event again (freshly signed, as a sender retries
/// when it never saw the 200) is a duplicate with no second effect; another event is another
/// effect.
pub async fn a_delivered_event_is_processed_once_however_often_it_arrives<R: ReceiverUnderTest>(
    receiver: &R,
    backend: Backend,
) {
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    let body = event_body("evt_once", 1999, "eur");

    let answer = deliver(&url, &config, &body).await;
    assert_eq!(answer.pair(), (200, outcome("processed").as_str()));
    let expected = vec![effect("evt_once", 1999, "eur")];
    assert_eq!(running.effects().await, expected);
    for _ in 0..5 {
        let answer = deliver(&url, &config, &body).await;
        assert_eq!(answer.pair(), (200, outcome("duplicate").as_str()));
    }
    assert_eq!(running.effects().await, expected);

    let answer = deliver(&url, &config, &event_body("evt_other", 500, "usd")).await;
    assert_eq!(answer.pair(), (200, outcome("processed").as_str()));
    assert_eq!(
        running.effects().await,
        [expected[0].clone(), effect("evt_other", 500, "usd")]
    );
    let mut logged = vec!["processed"];
    logged.extend(["duplicate"; 5]);
    logged.push("processed");
    assert_eq!(outcomes(&requests(&running, 7).await), logged);
    finish(running, database).await;
}

/// The dedup key is the verified body's `id`: a replay under another (unsigned)
/// `X-Kxp-Event-Id` is a duplicate, a new event is new whatever its header claims, and the
/// header never reaches the logs.
pub async fn a_replay_under_another_event_id_header_is_a_duplicate<R: ReceiverUnderTest>(
    receiver: &R,
    backend: Backend,
) {
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    let body = event_body("evt_replayed", 1, "eur");
    let with_header = |body: &str, header: &str| {
        let request = delivery(&url, &config, body, Some(header));
        send(request)
    };

    let first = with_header(&body, "evt_replayed").await;
    assert_eq!(first.pair(), (200, outcome("processed").as_str()));
    let replay = with_header(&body, "evt_fresh_looking").await;
    assert_eq!(replay.pair(), (200, outcome("duplicate").as_str()));
    assert_eq!(effect_ids(&running.effects().await), ["evt_replayed"]);
    let other = with_header(&event_body("evt_other", 2, "eur"), "evt_replayed").await;
    assert_eq!(other.pair(), (200, outcome("processed").as_str()));
    assert_eq!(
        effect_ids(&running.effects().await),
        ["evt_replayed", "evt_other"]
    );

    let lines = requests(&running, 3).await;
    let logged: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            let (id, _, outcome, _) = fields(l);
            (id, outcome)
        })
        .collect();
    let pair = |id: &str, outcome: &str| (id.to_owned(), outcome.to_owned());
    assert_eq!(
        logged,
        [
            pair("evt_replayed", "processed"),
            pair("evt_replayed", "duplicate"),
            pair("evt_other", "processed")
        ]
    );
    let text = running.log_lines(3).await.join("\n");
    assert!(!text.contains("evt_fresh_looking"));
    finish(running, database).await;
}

/// Fifty deliveries of one event at once, while the first one's handler is slow: one effect,
/// one `processed`, and the others either wait and answer 200 (in-transaction mode) or answer
/// 409 + `Retry-After` (claim/complete mode). A later delivery is a plain duplicate, and every
/// request logs one line.
pub async fn fifty_concurrent_deliveries_run_the_handler_once<R: ReceiverUnderTest>(
    receiver: &R,
    backend: Backend,
) {
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config {
        // Long enough that most deliveries arrive while the first one is being processed.
        slow: Some(Duration::from_millis(300)),
        ..Config::new(database.url())
    };
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    let body = event_body("evt_fifty", 1, "eur");

    let answers = join_all((0..50).map(|_| deliver(&url, &config, &body))).await;
    assert_eq!(effect_ids(&running.effects().await), ["evt_fifty"]);
    for answer in &answers {
        match (answer.status, receiver.mode()) {
            (200, _) => assert!(answer.retry_after.is_none()),
            (409, Mode::ClaimComplete) => {
                assert!(answer.retry_after.is_some_and(|s| s >= 1), "{answer:?}");
                assert_eq!(answer.body, outcome("in_progress"));
            }
            (status, mode) => panic!("{mode:?}: {status} {}", answer.body),
        }
    }
    let processed = answers
        .iter()
        .filter(|a| a.body == outcome("processed"))
        .count();
    assert_eq!(processed, 1);

    // Once done, a delivery is a plain duplicate, and its log line says so.
    let again = deliver(&url, &config, &body).await;
    assert_eq!(again.pair(), (200, outcome("duplicate").as_str()));
    assert_eq!(running.effects().await.len(), 1);
    let logged = outcomes(&requests(&running, 51).await);
    assert_eq!(logged.iter().filter(|o| *o == "processed").count(), 1);
    assert_eq!(logged.last().map(String::as_str), Some("duplicate"));
    let answered_200 = answers.iter().filter(|a| a.status == 200).count();
    let logged_duplicates = logged.iter().filter(|o| *o == "duplicate").count();
    assert_eq!(
        logged_duplicates, answered_200,
        "every 200 but the processed one, plus the late delivery, logs `duplicate`"
    );
    finish(running, database).await;
}

/// A failing handler answers 500 (no `Retry-After`: the sender's schedule decides) and leaves
/// no effect (in-transaction mode: its write rolls back); the next delivery processes the
/// event, and the one after is a duplicate.
pub async fn a_failed_handler_answers_500_and_the_next_delivery_processes<R: ReceiverUnderTest>(
    receiver: &R,
    backend: Backend,
) {
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    let body = event_body("evt_fails_once", 1999, "eur");

    running.fail_handler(true).await;
    let first = deliver(&url, &config, &body).await;
    assert_eq!(
        (first.pair(), first.retry_after),
        ((500, outcome("failed").as_str()), None)
    );
    assert!(
        running.effects().await.is_empty(),
        "the failed run left an effect"
    );
    running.fail_handler(false).await;

    let second = deliver(&url, &config, &body).await;
    assert_eq!(second.pair(), (200, outcome("processed").as_str()));
    let third = deliver(&url, &config, &body).await;
    assert_eq!(third.pair(), (200, outcome("duplicate").as_str()));
    assert_eq!(
        running.effects().await,
        [effect("evt_fails_once", 1999, "eur")]
    );

    let lines = requests(&running, 3).await;
    assert_eq!(outcomes(&lines), ["failed", "processed", "duplicate"]);
    let statuses: Vec<u64> = lines.iter().map(|l| fields(l).3).collect();
    assert_eq!(statuses, [500, 200, 200]);
    finish(running, database).await;
}

/// A claim nobody completes (its process was killed mid-handler) answers 409 + `Retry-After`
/// while its lease lasts; after the lease, the next delivery processes the event.
pub async fn an_abandoned_claim_answers_409_until_its_lease_ends<R: ReceiverUnderTest>(
    receiver: &R,
    backend: Backend,
) {
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();
    let lease = Duration::from_secs(1);

    // The delivery must follow the claim within the lease. On a machine so loaded that it
    // arrives after the lease, that try proves nothing: take another id.
    let mut tries = 0;
    let (id, claimed_at) = loop {
        tries += 1;
        let id = format!("evt_abandoned_{tries}");
        let claimed_at = Instant::now();
        running.abandon_claim(&id, lease).await;
        let answer = deliver(&url, &config, &event_body(&id, 1, "eur")).await;
        if answer.status == 409 {
            assert!(answer.retry_after.is_some_and(|s| s >= 1), "{answer:?}");
            assert_eq!(answer.body, outcome("in_progress"));
            break (id, claimed_at);
        }
        assert!(
            claimed_at.elapsed() >= lease && tries < 5,
            "status {} within the lease",
            answer.status
        );
    };
    assert!(!effect_ids(&running.effects().await).contains(&id.as_str()));

    // After the lease the event is anyone's again, and this delivery processes it.
    let after_lease = lease + Duration::from_millis(150);
    tokio::time::sleep(after_lease.saturating_sub(claimed_at.elapsed())).await;
    let answer = deliver(&url, &config, &event_body(&id, 1, "eur")).await;
    assert_eq!(answer.pair(), (200, outcome("processed").as_str()));
    let effects = running.effects().await;
    assert_eq!(effect_ids(&effects).iter().filter(|e| **e == id).count(), 1);
    let logged = outcomes(&requests(&running, tries + 1).await);
    assert_eq!(logged[logged.len() - 2..], ["in_progress", "processed"]);
    finish(running, database).await;
}

/// While the database is unusable every delivery answers 503 + `Retry-After` (never 200) and
/// logs `failed` with status 503; nothing is recorded, so once the database is back the next
/// delivery processes the event.
pub async fn a_store_that_is_down_answers_503_never_200<R: ReceiverUnderTest>(
    receiver: &R,
    backend: Backend,
) {
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config::new(database.url());
    let running = receiver.start(config.clone()).await;
    let url = running.url();

    let outage = Outage::begin(&database).await;
    let bodies = ["evt_down_1", "evt_down_1", "evt_down_2"].map(|id| event_body(id, 1, "eur"));
    let answers = join_all(bodies.iter().map(|body| deliver(&url, &config, body))).await;
    for answer in &answers {
        assert_eq!(answer.pair(), (503, outcome("failed").as_str()));
        assert!(answer.retry_after.is_some_and(|s| s >= 1), "{answer:?}");
    }
    let lines = requests(&running, 3).await;
    for line in &lines {
        let (_, verification, outcome, status) = fields(line);
        assert_eq!(
            (verification.as_str(), outcome.as_str(), status),
            ("ok", "failed", 503)
        );
    }
    outage.end().await;

    assert!(running.effects().await.is_empty());
    let answer = deliver(&url, &config, &bodies[0]).await;
    assert_eq!(answer.pair(), (200, outcome("processed").as_str()));
    assert_eq!(effect_ids(&running.effects().await), ["evt_down_1"]);
    finish(running, database).await;
}

/// A receiver killed while its handler runs (inside the transaction) never answers; nothing is
/// recorded, and after a restart the sender's next delivery processes the event: once.
pub async fn killed_mid_processing_the_event_is_recorded_once_after_a_restart<
    R: ReceiverUnderTest,
>(
    receiver: &R,
    backend: Backend,
) {
    assert_eq!(
        receiver.mode(),
        Mode::InTransaction,
        "in claim/complete mode a killed handler's claim holds until its lease ends"
    );
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config {
        slow: Some(Duration::from_secs(3)),
        ..Config::new(database.url())
    };
    let mut running = receiver.start(config.clone()).await;
    let body = event_body("evt_killed", 4200, "eur");

    let in_flight = tokio::spawn(try_send(delivery(&running.url(), &config, &body, None)));
    wait_for_open_transaction(&database).await;
    running.kill().await;
    let answer = in_flight
        .await
        .unwrap_or_else(|e| panic!("the delivery task failed: {e}"));
    assert!(
        answer.is_err(),
        "the killed request was answered: {answer:?}"
    );
    assert!(running.effects().await.is_empty());
    drop(running);

    let config = Config {
        slow: None,
        ..config
    };
    let running = receiver.start(config.clone()).await;
    // "processed", not "duplicate": the killed attempt's mark rolled back with its effect.
    let answer = deliver(&running.url(), &config, &body).await;
    assert_eq!(answer.pair(), (200, outcome("processed").as_str()));
    let answer = deliver(&running.url(), &config, &body).await;
    assert_eq!(answer.pair(), (200, outcome("duplicate").as_str()));
    assert_eq!(running.effects().await, [effect("evt_killed", 4200, "eur")]);
    finish(running, database).await;
}

/// Stopped by `SIGTERM` (what an orchestrator sends first) or `SIGINT` (Ctrl-C) while a
/// request is inside its handler, a receiver finishes that request before it exits: the
/// sender gets its 200 and the event is recorded once. Then, started again, the same events are
/// duplicates.
pub async fn stopped_mid_processing_the_request_completes_and_is_recorded_once<
    R: ReceiverUnderTest,
>(
    receiver: &R,
    backend: Backend,
) {
    let Some(database) = database(backend).await else {
        return;
    };
    let config = Config {
        slow: Some(Duration::from_secs(2)),
        ..Config::new(database.url())
    };
    let mut recorded = Vec::new();
    for (signal, id) in [(Signal::Term, "evt_sigterm"), (Signal::Int, "evt_sigint")] {
        let mut running = receiver.start(config.clone()).await;
        let body = event_body(id, 4200, "eur");
        let in_flight = tokio::spawn(try_send(delivery(&running.url(), &config, &body, None)));
        wait_for_open_transaction(&database).await;
        running.stop(signal).await;
        let answer = in_flight
            .await
            .unwrap_or_else(|e| panic!("the delivery task failed: {e}"))
            .unwrap_or_else(|e| panic!("{signal:?} cut the request in flight off: {e}"));
        assert_eq!(
            answer.pair(),
            (200, outcome("processed").as_str()),
            "{signal:?}"
        );
        recorded.push(effect(id, 4200, "eur"));
        assert_eq!(running.effects().await, recorded, "{signal:?}");
        drop(running);
    }

    let config = Config {
        slow: None,
        ..config
    };
    let running = receiver.start(config.clone()).await;
    for id in ["evt_sigterm", "evt_sigint"] {
        let answer = deliver(&running.url(), &config, &event_body(id, 4200, "eur")).await;
        assert_eq!(answer.pair(), (200, outcome("duplicate").as_str()), "{id}");
    }
    assert_eq!(running.effects().await, recorded);
    finish(running, database).await;
}
