//! Seeding a million deliveries straight into a migrated, stopped `kxp serve`'s database: one
//! account (the server's first), its endpoints, events with tags, two deliveries per event
//! (mostly delivered, some thousands dead, some of those replayed, some pending for a later
//! retry), every attempt of every delivery, and the hourly statistics those attempts add up to.
//! Multi-row literal `INSERT`s, in creation order (the tables' physical order is their time
//! order, as in a real database), the same statements on both backends.
//!
//! Columns and formats follow `kxp-sender/migrations/{sqlite,postgres}/*.sql` and the store:
//! times in Unix ms, event ids UUIDv4 strings, delivery and endpoint ids `dlv_`/`ep_` and a
//! UUIDv7 in simple hex (time-ordered), tags `order:<n>` (one event each), `customer:cus_<n>`
//! (`events / customers` events each) and `plan:enterprise` (every 10th event).

use std::collections::HashMap;
use std::fmt::Write as _;

/// Event types, in turn.
const TYPES: [&str; 5] = [
    "order.created",
    "order.paid",
    "order.refunded",
    "invoice.paid",
    "customer.updated",
];

/// Histogram bounds of `kxp_endpoint_stats_hourly` (`le_inf` past the last).
const BOUNDS: [i64; 11] = [10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000];

const HOUR_MS: i64 = 3_600_000;

/// What to seed.
#[derive(Clone)]
pub struct Plan {
    pub account: String,
    pub api_version: String,
    pub deliveries: u64,
    pub endpoints: usize,
    pub customers: u64,
    /// The span of time the events cover, ending now.
    pub span_ms: i64,
    pub now: i64,
}

/// What the seeding made that the measurements need.
#[derive(Debug, Default, Clone)]
pub struct Seeded {
    pub endpoints: Vec<String>,
    /// The endpoint that fails often (most of the dead letters).
    pub failing: String,
    /// A healthy endpoint (a few dead letters).
    pub healthy: String,
    pub events: u64,
    pub deliveries: u64,
    pub attempts: u64,
    pub tags: u64,
    pub dead: u64,
    pub dead_unreplayed: u64,
    pub dead_unreplayed_failing: u64,
    pub dead_unreplayed_healthy: u64,
    pub pending: u64,
    /// An event in the middle of the range, its `order:` tag, and one of its deliveries.
    pub mid_event: String,
    pub mid_tag: String,
    pub mid_delivery: String,
    /// A recent event with a dead delivery (8 attempts).
    pub dead_event: String,
    pub customer_tag: String,
}

/// A small, fast, deterministic generator (splitmix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A UUIDv4, hyphenated, lower case (what `uuid::Uuid::new_v4().to_string()` gives).
    pub fn uuid_v4(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        let a = (a & !0xf000) | 0x4000; // version 4 in bits 12..16 of the third group
        let b = (b & !(0b11 << 62)) | (0b10 << 62); // variant 10
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }
    /// `<prefix>_` and a UUIDv7 of `ms` in simple hex (what `new_id` gives).
    pub fn id_v7(&mut self, prefix: &str, ms: i64) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{prefix}_{:012x}7{:03x}{:x}{:015x}",
            ms as u64 & 0xffff_ffff_ffff,
            a & 0xfff,
            8 | (b >> 62),
            b & 0x0fff_ffff_ffff_ffff
        )
    }
}

/// RFC 3339 in UTC with milliseconds, as the envelopes carry it.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// Rows waiting to be written, one `INSERT … VALUES` per table, flushed at `batch` rows.
pub struct Writer {
    tables: Vec<(&'static str, String, usize)>,
    batch: usize,
    pub statements: Vec<String>,
}

impl Writer {
    fn new(batch: usize) -> Self {
        Writer {
            tables: Vec::new(),
            batch,
            statements: Vec::new(),
        }
    }
    fn row(&mut self, head: &'static str, values: std::fmt::Arguments<'_>) {
        let index = match self.tables.iter().position(|(h, _, _)| *h == head) {
            Some(i) => i,
            None => {
                self.tables.push((head, String::new(), 0));
                self.tables.len() - 1
            }
        };
        let (_, sql, n) = &mut self.tables[index];
        if *n == 0 {
            sql.push_str(head);
            sql.push_str(" VALUES ");
        } else {
            sql.push(',');
        }
        sql.push('(');
        sql.write_fmt(values).expect("writing to a String");
        sql.push(')');
        *n += 1;
        if *n >= self.batch {
            // Every table, parents first: a child row never arrives before the row it names.
            for (_, sql, n) in &mut self.tables {
                if *n > 0 {
                    self.statements.push(std::mem::take(sql));
                    *n = 0;
                }
            }
        }
    }
    /// Every pending statement, parents first (the order the tables were first written).
    pub fn flush(&mut self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.statements);
        for (_, sql, n) in &mut self.tables {
            if *n > 0 {
                out.push(std::mem::take(sql));
                *n = 0;
            }
        }
        out
    }
}

const EVENTS: &str =
    "INSERT INTO kxp_events (id, account_id, event_type, api_version, payload, created_at)";
const TAGS: &str = "INSERT INTO kxp_event_tags (event_id, tag, account_id, created_at)";
const DELIVERIES: &str = "INSERT INTO kxp_deliveries (id, account_id, event_id, endpoint_id, status, attempts, \
     first_attempt_at, next_attempt_at, last_status, last_error, replayed_by, created_at, updated_at)";
const ATTEMPTS: &str = "INSERT INTO kxp_attempts (delivery_id, attempt, started_at, duration_ms, status_code, \
     error, response_snippet, signed_with)";

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "NULL".to_owned(), |v| v.to_string())
}
fn opt_text(v: Option<&str>) -> String {
    v.map_or_else(|| "NULL".to_owned(), |v| format!("'{v}'"))
}

#[derive(Default, Clone, Copy)]
struct Hour {
    successes: i64,
    failures: i64,
    buckets: [i64; 12],
}

/// One delivery's outcome, drawn.
struct Outcome {
    status: &'static str,
    /// (duration, status code) of each attempt, in order.
    attempts: Vec<(i64, Option<i64>)>,
    next_attempt_at: i64,
    updated_at: i64,
}

/// When attempt `k` (1-based) starts, after the delivery's creation: the retry schedule.
fn attempt_offset(k: usize) -> i64 {
    [
        0, 5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000, 7_200_000,
    ][(k - 1).min(7)]
}

/// The statements that seed `plan`, handed to `sink` a few thousand rows at a time (so the
/// whole data set is never in memory), and what they made.
pub fn seed(plan: &Plan, sink: std::sync::mpsc::SyncSender<Vec<String>>) -> Result<Seeded, String> {
    let send = |statements: Vec<String>| {
        sink.send(statements)
            .map_err(|_| "the writer stopped".to_owned())
    };
    let mut rng = Rng::new(0x6b78_7073_6565_6421);
    let acc = plan.account.as_str();
    let start = plan.now - plan.span_ms;
    let mut out = Seeded::default();
    let mut w = Writer::new(1000);

    // Endpoints, their secrets and fingerprints (as `signed_with` holds them).
    let mut fingerprints = Vec::new();
    for n in 0..plan.endpoints {
        let created = start - 86_400_000 + n as i64 * 60_000;
        let id = rng.id_v7("ep", created);
        let secret = format!(
            "{:016x}{:016x}{:016x}{:016x}",
            rng.next(),
            rng.next(),
            rng.next(),
            rng.next()
        );
        fingerprints.push(format!("{:016x}", rng.next()));
        w.row(
            "INSERT INTO kxp_endpoints (id, account_id, url, description, event_types, timeout_ms, status, created_at, updated_at)",
            format_args!(
                "'{id}', '{acc}', 'https://merchant-{n}.example/webhooks/kxp', 'endpoint {n}', '[\"*\"]', 10000, 'active', {created}, {created}"
            ),
        );
        w.row(
            "INSERT INTO kxp_endpoint_secrets (endpoint_id, secret, created_at)",
            format_args!("'{id}', '{secret}', {created}"),
        );
        out.endpoints.push(id);
    }
    let failing = 3 % plan.endpoints;
    let healthy = 0;
    out.failing = out.endpoints[failing].clone();
    out.healthy = out.endpoints[healthy].clone();
    send(w.flush())?;

    let n_events = plan.deliveries / 2;
    out.events = n_events;
    let endpoints = plan.endpoints as u64;
    let mut hourly: HashMap<(usize, i64), Hour> = HashMap::new();
    let mut replays: Vec<(String, String, usize, i64)> = Vec::new(); // id, event, endpoint, at
    let mut last_failure = vec![None; plan.endpoints];
    let mut last_success = vec![None; plan.endpoints];
    let record =
        |hourly: &mut HashMap<(usize, i64), Hour>, ep: usize, at: i64, duration: i64, ok: bool| {
            let h = hourly
                .entry((ep, at.div_euclid(HOUR_MS) * HOUR_MS))
                .or_default();
            if ok {
                h.successes += 1;
            } else {
                h.failures += 1;
            }
            let bucket = BOUNDS.iter().position(|b| duration <= *b).unwrap_or(11);
            h.buckets[bucket] += 1;
        };
    for i in 0..n_events {
        let created = start + (i as i64 * plan.span_ms) / n_events as i64;
        let event = rng.uuid_v4();
        let ty = TYPES[(i % TYPES.len() as u64) as usize];
        let customer = i % plan.customers;
        let amount = 500 + rng.next() % 50_000;
        w.row(
            EVENTS,
            format_args!(
                "'{event}', '{acc}', '{ty}', '{v}', '{{\"id\":\"{event}\",\"type\":\"{ty}\",\"api_version\":\"{v}\",\"created_at\":\"{at}\",\"data\":{{\"order\":{{\"id\":\"order_{o}\",\"amount\":{amount},\"currency\":\"eur\",\"customer\":\"cus_{customer}\",\"lines\":[{{\"sku\":\"sku_{s}\",\"qty\":1}}]}}}}}}', {created}",
                v = plan.api_version,
                at = rfc3339(created),
                o = i + 1,
                s = i % 977,
            ),
        );
        let mut tags = vec![
            format!("order:{}", i + 1),
            format!("customer:cus_{customer}"),
        ];
        if i % 10 == 0 {
            tags.push("plan:enterprise".to_owned());
        }
        for tag in &tags {
            w.row(TAGS, format_args!("'{event}', '{tag}', '{acc}', {created}"));
        }
        out.tags += tags.len() as u64;
        if i == n_events / 2 {
            out.mid_event = event.clone();
            out.mid_tag = tags[0].clone();
        }
        let first = (i % endpoints) as usize;
        let second = ((i % endpoints + 1 + (i / endpoints) % (endpoints - 1)) % endpoints) as usize;
        for (k, ep) in [first, second].into_iter().enumerate() {
            let at = created + k as i64;
            let id = rng.id_v7("dlv", at);
            let age = plan.now - at;
            let r = rng.next() % 100_000;
            let ok_ms = 20 + (rng.next() % 280) as i64;
            let outcome = if ep == failing && age < HOUR_MS {
                let tries = 1 + (r % 3) as usize;
                Outcome {
                    status: "pending",
                    attempts: vec![(10_000, None); tries],
                    next_attempt_at: plan.now + 6 * HOUR_MS,
                    updated_at: at + attempt_offset(tries),
                }
            } else if (ep == failing && r.is_multiple_of(10)) || r % 1000 == 7 {
                let updated = (at + attempt_offset(8) + 10_000).min(plan.now - 1);
                Outcome {
                    status: "dead",
                    attempts: (0..8)
                        .map(|t| {
                            if (r + t).is_multiple_of(2) {
                                (10_000, None)
                            } else {
                                (ok_ms, Some(503))
                            }
                        })
                        .collect(),
                    next_attempt_at: updated,
                    updated_at: updated,
                }
            } else if age < 10 * 60_000 && r % 100 == 3 {
                Outcome {
                    status: "pending",
                    attempts: vec![(10_000, None)],
                    next_attempt_at: plan.now + 6 * HOUR_MS,
                    updated_at: at + 10_000,
                }
            } else if r % 20 == 1 || ep == failing {
                Outcome {
                    status: "delivered",
                    attempts: vec![(ok_ms, Some(503)), (ok_ms, Some(200))],
                    next_attempt_at: at + attempt_offset(2),
                    updated_at: at + attempt_offset(2) + ok_ms,
                }
            } else {
                Outcome {
                    status: "delivered",
                    attempts: vec![(ok_ms, Some(200))],
                    next_attempt_at: at,
                    updated_at: at + ok_ms,
                }
            };
            let last = outcome.attempts.last().copied();
            let (last_status, last_error) = match (outcome.status, last) {
                ("delivered", _) => (Some(200), None),
                (_, Some((_, Some(code)))) => (Some(code), Some(format!("http_{code}"))),
                _ => (None, Some("timeout: no response within 10s".to_owned())),
            };
            let replayed_by = (outcome.status == "dead"
                && outcome.updated_at < plan.now - 24 * HOUR_MS
                && r.is_multiple_of(3))
            .then(|| {
                let when = outcome.updated_at + 2 * HOUR_MS;
                let replay = rng.id_v7("dlv", when);
                replays.push((replay.clone(), event.clone(), ep, when));
                replay
            });
            match outcome.status {
                "dead" => {
                    out.dead += 1;
                    if replayed_by.is_none() {
                        out.dead_unreplayed += 1;
                        if ep == failing {
                            out.dead_unreplayed_failing += 1;
                        }
                        if ep == healthy {
                            out.dead_unreplayed_healthy += 1;
                        }
                        if age < 24 * HOUR_MS {
                            out.dead_event = event.clone();
                        }
                    }
                }
                "pending" => out.pending += 1,
                _ => {}
            }
            if i == n_events / 2 && k == 0 {
                out.mid_delivery = id.clone();
            }
            w.row(
                DELIVERIES,
                format_args!(
                    "'{id}', '{acc}', '{event}', '{ep_id}', '{status}', {tries}, {at}, {next}, {ls}, {le}, {rb}, {at}, {upd}",
                    ep_id = out.endpoints[ep],
                    status = outcome.status,
                    tries = outcome.attempts.len(),
                    next = outcome.next_attempt_at,
                    ls = opt(last_status),
                    le = opt_text(last_error.as_deref()),
                    rb = opt_text(replayed_by.as_deref()),
                    upd = outcome.updated_at,
                ),
            );
            out.deliveries += 1;
            for (n, (duration, code)) in outcome.attempts.iter().enumerate() {
                let started = at + attempt_offset(n + 1);
                let ok = *code == Some(200);
                let (error, snippet) = match code {
                    Some(200) => ("NULL".to_owned(), "'{\"received\":true}'".to_owned()),
                    Some(c) => (format!("'http_{c}'"), "'upstream unavailable'".to_owned()),
                    None => (
                        "'timeout: no response within 10s'".to_owned(),
                        "NULL".to_owned(),
                    ),
                };
                w.row(
                    ATTEMPTS,
                    format_args!(
                        "'{id}', {a}, {started}, {duration}, {code}, {error}, {snippet}, '{fp}'",
                        a = n + 1,
                        code = opt(*code),
                        fp = fingerprints[ep],
                    ),
                );
                out.attempts += 1;
                record(&mut hourly, ep, started, *duration, ok);
                if ok {
                    last_success[ep] = Some(started);
                } else {
                    last_failure[ep] = Some(started);
                }
            }
        }
        if w.statements.len() >= 16 {
            let statements = std::mem::take(&mut w.statements);
            send(statements)?;
        }
    }
    // The replays of old dead letters: delivered at once.
    for (id, event, ep, at) in replays {
        w.row(
            DELIVERIES,
            format_args!(
                "'{id}', '{acc}', '{event}', '{ep_id}', 'delivered', 1, {at}, {at}, 200, NULL, NULL, {at}, {upd}",
                ep_id = out.endpoints[ep],
                upd = at + 80,
            ),
        );
        w.row(
            ATTEMPTS,
            format_args!(
                "'{id}', 1, {at}, 80, 200, NULL, '{{\"received\":true}}', '{fp}'",
                fp = fingerprints[ep]
            ),
        );
        record(&mut hourly, ep, at, 80, true);
        out.deliveries += 1;
        out.attempts += 1;
    }
    // The statistics the attempts add up to.
    let mut hours: Vec<_> = hourly.into_iter().collect();
    hours.sort_by_key(|((ep, hour), _)| (*ep, *hour));
    for ((ep, hour), h) in hours {
        let buckets = h
            .buckets
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        w.row(
            "INSERT INTO kxp_endpoint_stats_hourly (endpoint_id, hour, successes, failures, le_10, le_25, le_50, \
             le_100, le_250, le_500, le_1000, le_2500, le_5000, le_10000, le_30000, le_inf)",
            format_args!("'{}', {hour}, {}, {}, {buckets}", out.endpoints[ep], h.successes, h.failures),
        );
    }
    for ep in 0..plan.endpoints {
        let consecutive = if ep == failing { 3 } else { 0 };
        w.row(
            "INSERT INTO kxp_endpoint_stats (endpoint_id, consecutive_failures, last_success_at, last_failure_at, last_error, updated_at, failing_since)",
            format_args!(
                "'{}', {consecutive}, {}, {}, {}, {}, {}",
                out.endpoints[ep],
                opt(last_success[ep]),
                opt(last_failure[ep]),
                if ep == failing { "'timeout: no response within 10s'" } else { "NULL" },
                plan.now,
                if ep == failing { (plan.now - 600_000).to_string() } else { "NULL".to_owned() },
            ),
        );
    }
    send(w.flush())?;
    out.customer_tag = "customer:cus_42".to_owned();
    Ok(out)
}
