//! `GET /metrics`: Prometheus text format, without a key, counting what this process did and
//! what waits in the database.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::support::{Database, Receiver, Reply};

/// The samples of an exposition, `name{labels}` → value, after checking every line's syntax
/// and that each sample belongs to the family declared above it.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    let mut family = String::new();
    let mut kinds = 0;
    for line in text.lines() {
        if let Some(help) = line.strip_prefix("# HELP ") {
            assert!(
                help.split_once(' ').is_some_and(|(_, h)| !h.is_empty()),
                "{line}"
            );
        } else if let Some(kind) = line.strip_prefix("# TYPE ") {
            let (name, kind) = kind.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            family = name.to_owned();
            kinds += 1;
        } else {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("{line}"));
            let name = series.split('{').next().unwrap();
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{line}"
            );
            assert!(name.starts_with(&family), "{line} outside {family}");
            let labels = &series[name.len()..];
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                for pair in labels[1..labels.len() - 1].split(',') {
                    let (key, value) = pair.split_once('=').unwrap();
                    assert!(key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
                    assert!(value.starts_with('"') && value.ends_with('"'), "{line}");
                }
            }
            assert!(
                samples.insert(series.to_owned(), value).is_none(),
                "twice: {line}"
            );
        }
    }
    assert!(kinds >= 9, "{text}");
    samples
}

each_backend!(metrics_count_attempts_deliveries_and_the_queue);
on_citus!(metrics_count_attempts_deliveries_and_the_queue);

async fn metrics_count_attempts_deliveries_and_the_queue(database: Database) {
    let s = database.sender("0s,10ms").await;
    let rx = Receiver::start(vec![Reply::Status(500)]).await;
    let (ep, _) = s.api.endpoint(&rx.url, json!({})).await;
    let first = s.api.emit("t", json!({"n": 1})).await;
    let second = s.api.emit("t", json!({"n": 2})).await;
    for event in [&first, &second] {
        s.api
            .wait_for(event, "delivered", Duration::from_secs(10))
            .await;
    }
    s.api
        .client
        .pause_endpoint(&ep.as_str().into())
        .await
        .unwrap();
    s.api.emit("t", json!({"n": 3})).await;

    // No key needed: a scraper has none.
    let response = reqwest::get(format!("{}/metrics", s.api.base))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    let m = parse(&text);
    let get = |series: &str| {
        *m.get(series)
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(get("kxp_events_ingested_total"), 3.0);
    assert_eq!(get("kxp_attempts_total{outcome=\"success\"}"), 2.0);
    assert_eq!(get("kxp_attempts_total{outcome=\"http_5xx\"}"), 1.0);
    assert_eq!(get("kxp_attempts_total{outcome=\"timeout\"}"), 0.0);
    assert_eq!(get("kxp_attempt_duration_seconds_count"), 3.0);
    assert_eq!(get("kxp_attempt_duration_seconds_bucket{le=\"+Inf\"}"), 3.0);
    assert!(get("kxp_attempt_duration_seconds_sum") >= 0.0);
    assert_eq!(
        get("kxp_deliveries_finished_total{result=\"delivered\"}"),
        2.0
    );
    assert_eq!(get("kxp_deliveries_finished_total{result=\"dead\"}"), 0.0);
    assert_eq!(get("kxp_deliveries{state=\"held\"}"), 1.0);
    assert_eq!(get("kxp_deliveries{state=\"due\"}"), 0.0);
    assert_eq!(get("kxp_delivery_lag_seconds"), 0.0);
    assert_eq!(
        get("kxp_endpoints{status=\"paused\",circuit_state=\"closed\"}"),
        1.0
    );
    // On Citus, with every worker up, each cross-account scan read every shard in one
    // statement (a template Citus cannot plan would read shard by shard on every pass, at a
    // connection per shard: what this catches). The count is the process's, every test's.
    // Elsewhere they are absent (or, with Citus's statement forms on one PostgreSQL, 0).
    for series in [
        "kxp_store_scans_by_shard_total",
        "kxp_store_shards_unanswered",
    ] {
        if database.is_citus() {
            assert_eq!(get(series), 0.0, "{series}");
        } else {
            assert!(m.get(series).is_none_or(|v| *v == 0.0), "{series}");
        }
    }
    // Histogram buckets are cumulative.
    let buckets: Vec<f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with("kxp_attempt_duration_seconds_bucket"))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(buckets.len(), 12);
    assert!(
        !text.contains(&ep) && !text.contains(&first),
        "no ids on the page"
    );
    s.server.shutdown().await;
}
