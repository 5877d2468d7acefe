//! `deploy/prometheus/alerts.yml` and `deploy/grafana/kxp.json` name only what `GET /metrics`
//! exports. promtool checks the rules' syntax and logic against series the tests write
//! themselves, so it cannot see a misspelt metric or label value: such a rule parses, passes
//! its tests and never fires. Here every `kxp_…` name of both files must be a family the
//! running sender declares (`# TYPE`), and every label matcher `name{label="value"}` must match
//! one of its samples, after the sender has done the work that makes the labelled series
//! appear: a delivery gone dead, an endpoint's circuit opened, a broker source configured.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kxp_sender::Protection;
use serde_json::{Value, json};

use crate::support::{Database, Receiver};

const ALERTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/prometheus/alerts.yml"
);
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/kxp.json");

/// A selector's label matcher: `label`, the operator (`=`, `!=`, `=~`, `!~`), the value.
type Matcher = (String, String, String);

/// Every `kxp_…` name in `text`, with the matchers of its `{…}` when it has one.
fn selectors(text: &str) -> Vec<(String, Vec<Matcher>)> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = text[at..].find("kxp_") {
        let start = at + offset;
        let mut end = start;
        while end < bytes.len() && word(bytes[end]) {
            end += 1;
        }
        at = end;
        // `kxp_` inside a longer word (`my_kxp_…`) is not a metric name.
        if start > 0 && word(bytes[start - 1]) {
            continue;
        }
        let name = text[start..end].to_owned();
        let mut matchers = Vec::new();
        if text[end..].starts_with('{') {
            let close = end + text[end..].find('}').expect("a selector's closing brace");
            for pair in text[end + 1..close]
                .split(',')
                .filter(|p| !p.trim().is_empty())
            {
                let split = pair.find(['=', '!']).unwrap_or_else(|| panic!("{pair}"));
                let label = pair[..split].trim().to_owned();
                let rest = &pair[split..];
                let op_len = if rest.starts_with("=~") || rest.starts_with('!') {
                    2
                } else {
                    1
                };
                let value = rest[op_len..].trim().trim_matches('"').to_owned();
                matchers.push((label, rest[..op_len].to_owned(), value));
            }
            at = close;
        }
        found.push((name, matchers));
    }
    found
}

/// Every string of a JSON document: the dashboard's queries are strings among its panels.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// An exposition: each family's type (`# TYPE`), and each sample's name and labels.
struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>)>,
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut types = BTreeMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(declared) = line.strip_prefix("# TYPE ") {
                let (name, kind) = declared.split_once(' ').unwrap();
                types.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') {
                let (series, _value) = line.rsplit_once(' ').unwrap();
                let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
                let labels = labels.strip_suffix('}').unwrap();
                let labels = labels
                    .split("\",")
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, value) = pair.split_once("=\"").unwrap();
                        (key.to_owned(), value.trim_end_matches('"').to_owned())
                    })
                    .collect();
                samples.push((name.to_owned(), labels));
            }
        }
        Exposition { types, samples }
    }

    /// The family a name belongs to: itself, or the histogram whose `_bucket`, `_sum` or
    /// `_count` series it is.
    fn family_of<'a>(&self, name: &'a str) -> Option<&'a str> {
        if self.types.contains_key(name) {
            return Some(name);
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let family = name.strip_suffix(suffix)?;
            (self.types.get(family)? == "histogram").then_some(family)
        })
    }

    /// The labels of the samples of `family` (a histogram's series included).
    fn labels_of<'a>(
        &'a self,
        family: &'a str,
    ) -> impl Iterator<Item = &'a BTreeMap<String, String>> {
        self.samples
            .iter()
            .filter(move |(name, _)| {
                name == family
                    || name
                        .strip_prefix(family)
                        .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
            })
            .map(|(_, labels)| labels)
    }

    /// What is wrong with `name{matchers}` on this exposition, if anything.
    fn problem(&self, name: &str, matchers: &[Matcher]) -> Option<String> {
        let Some(family) = self.family_of(name) else {
            return Some(format!("{name}: no such metric"));
        };
        // Prometheus adds the target's labels at the scrape; the sender prints neither.
        let exported = matchers
            .iter()
            .filter(|(label, _, _)| !["job", "instance"].contains(&label.as_str()));
        for (label, op, value) in exported {
            let mut samples = self.labels_of(family);
            let ok = if op == "=" {
                samples.any(|l| l.get(label) == Some(value))
            } else {
                samples.any(|l| l.contains_key(label))
            };
            if !ok {
                return Some(format!("{name}: no sample with {label}{op}\"{value}\""));
            }
        }
        None
    }
}

each_backend!(alerts_and_dashboard_name_only_exported_metrics);
on_citus!(alerts_and_dashboard_name_only_exported_metrics);

/// The metrics only a sender on Citus exports: checked by the Citus run alone.
const CITUS_ONLY: [&str; 1] = ["kxp_store_shards_unanswered"];

async fn alerts_and_dashboard_name_only_exported_metrics(database: Database) {
    let alerts = std::fs::read_to_string(ALERTS).unwrap();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let mut texts = Vec::new();
    strings(&dashboard, &mut texts);
    let from_dashboard: Vec<_> = texts.iter().flat_map(|t| selectors(t)).collect();
    let from_alerts = selectors(&alerts);
    // A path or parsing mistake would find nothing, and so check nothing.
    for (file, found) in [(ALERTS, &from_alerts), (DASHBOARD, &from_dashboard)] {
        let names: BTreeSet<_> = found.iter().map(|(name, _)| name).collect();
        assert!(names.len() >= 5, "{file}: only {names:?}");
    }

    // One failed attempt is the delivery's last (schedule "0s") and the breaker's first
    // failure (threshold 1): it goes dead and opens the endpoint's circuit, which stays open
    // (the cool-down outlasts the test). The broker source never connects (nothing listens on
    // port 1); its series are there all the same.
    let s = database
        .sender_with("0s", |c| {
            c.protection = Protection {
                breaker_failures: 1,
                breaker_cooldown: Duration::from_secs(3600),
                breaker_cooldown_max: Duration::from_secs(3600),
                ..Protection::default()
            };
            c.ingest = vec![
                "amqp://127.0.0.1:1/%2f?queue=kxp&account_header=allow"
                    .parse()
                    .unwrap(),
            ];
        })
        .await;
    let rx = Receiver::start(vec![]).await;
    rx.answer_rest_with(500);
    s.api.endpoint(&rx.url, json!({})).await;
    let event = s.api.emit("t", json!({"n": 1})).await;
    s.api
        .wait_for(&event, "dead", Duration::from_secs(10))
        .await;

    let response = reqwest::get(format!("{}/metrics", s.api.base))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let exposition = Exposition::parse(&text);
    let problems: BTreeSet<String> = from_alerts
        .iter()
        .map(|found| (ALERTS, found))
        .chain(from_dashboard.iter().map(|found| (DASHBOARD, found)))
        .filter(|(_, (name, _))| database.is_citus() || !CITUS_ONLY.contains(&name.as_str()))
        .filter_map(|(file, (name, matchers))| {
            let problem = exposition.problem(name, matchers)?;
            Some(format!("{file}: {problem}"))
        })
        .collect();
    assert!(problems.is_empty(), "{problems:#?}\nin\n{text}");
    s.server.shutdown().await;
}

#[test]
fn selectors_are_read_with_their_matchers_and_unknown_names_are_problems() {
    let found = selectors(
        r#"sum(rate(kxp_a_total{result="dead", le!~"1"}[5m])) / my_kxp_b + kxp_c_bucket"#,
    );
    let m = |l: &str, op: &str, v: &str| (l.to_owned(), op.to_owned(), v.to_owned());
    assert_eq!(
        found,
        [
            (
                "kxp_a_total".to_owned(),
                vec![m("result", "=", "dead"), m("le", "!~", "1")]
            ),
            ("kxp_c_bucket".to_owned(), vec![]),
        ]
    );
    let exposition = Exposition::parse(
        "# TYPE kxp_a_total counter\nkxp_a_total{result=\"dead\"} 0\n\
         # TYPE kxp_c histogram\nkxp_c_bucket{le=\"+Inf\"} 0\nkxp_c_sum 0\nkxp_c_count 0\n",
    );
    assert_eq!(
        exposition.problem("kxp_c_bucket", &[m("le", "=", "+Inf")]),
        None
    );
    assert_eq!(
        exposition.problem(
            "kxp_a_total",
            &[m("job", "=~", "$job"), m("result", "=", "dead")]
        ),
        None
    );
    assert_eq!(
        exposition.problem("kxp_b_total", &[]).as_deref(),
        Some("kxp_b_total: no such metric")
    );
    assert_eq!(
        exposition.problem("kxp_a_bucket", &[]).as_deref(),
        Some("kxp_a_bucket: no such metric"),
        "only a histogram has buckets"
    );
    assert_eq!(
        exposition
            .problem("kxp_a_total", &[m("result", "=", "gone")])
            .as_deref(),
        Some("kxp_a_total: no sample with result=\"gone\"")
    );
}
