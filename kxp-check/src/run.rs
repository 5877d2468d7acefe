//! Running the checks: for each, the requests it makes and the answer graded. One request at a
//! time, apart from the burst, so that a finding shows exactly what caused it.
//!
//! The run is bounded: at most `12 + secrets + burst` requests, each given at most the target's
//! timeout, the burst [`BURST_CONCURRENCY`] at a time.

use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use reqwest::StatusCode;

use crate::Check;
use crate::event::TestEvent;
use crate::exchange::{self, Exchange, Request};
use crate::grade::{Expect, grade, grade_challenge};
use crate::report::{Finding, Latency, Report, Severity, Verdict};
use crate::sign::{random_hex, signature, unix_now};
use crate::target::{Secret, Target};

/// How far off the timestamps of the stale and future requests are: 6 minutes, over the
/// 5-minute tolerance by a minute, so that ordinary clock skew cannot make them pass.
const SKEW: u64 = 360;

/// How many burst events are in flight at once: "a few concurrently", as a sender's workers
/// deliver to one endpoint.
pub const BURST_CONCURRENCY: usize = 4;

/// Runs `checks` against `target` (each once, in the order of [`Check::ALL`], whatever the
/// order given) and reports on each.
///
/// Requests go to the target's URL only, redirects are reported and never followed, and every
/// event is a test event (`X-Kxp-Test: true`, the target's event type). A check the target does
/// not allow ([`Challenge`](Check::Challenge) when it is off, [`Rotation`](Check::Rotation) with
/// one secret) is reported as skipped.
pub async fn run(target: &Target, checks: &[Check]) -> Report {
    let started = Instant::now();
    let mut runner = Runner {
        target,
        requests: 0,
    };
    let mut findings = Vec::new();
    for check in Check::ALL.into_iter().filter(|c| checks.contains(c)) {
        findings.push(runner.check(check).await);
    }
    Report::new(
        target.display_url(),
        findings,
        runner.requests,
        started.elapsed(),
    )
}

struct Runner<'a> {
    target: &'a Target,
    requests: usize,
}

impl Runner<'_> {
    async fn check(&mut self, check: Check) -> Finding {
        let now = unix_now();
        // A copy of the reference, so that `all` does not borrow `self`.
        let target = self.target;
        let all = target.secrets();
        match check {
            Check::ValidEvent => {
                let event = self.event(check);
                let request = Request::event(&event, Some(signature(all, now, &event.body)));
                self.graded(check, Expect::Accept, request).await
            }
            Check::DuplicateEvent => self.duplicate().await,
            Check::ForgedSignature => {
                let forged = format!("t={now},v1={}", random_hex(32));
                self.refused(check, "a forged signature", Some(forged))
                    .await
            }
            Check::WrongSecret => {
                let event = self.event(check);
                let other = Secret(random_hex(32));
                let request = Request::event(&event, Some(signature([&other], now, &event.body)));
                self.graded(
                    check,
                    unauthentic("a signature made with another secret"),
                    request,
                )
                .await
            }
            Check::MissingHeader => {
                self.refused(check, "a request without X-Kxp-Signature", None)
                    .await
            }
            Check::MalformedHeader => {
                let malformed = format!("t={now},v1=not-a-signature");
                self.refused(check, "a malformed X-Kxp-Signature", Some(malformed))
                    .await
            }
            Check::TimestampTooOld => {
                self.stale(
                    check,
                    now.saturating_sub(SKEW),
                    "a request signed 6 minutes ago",
                )
                .await
            }
            Check::TimestampInFuture => {
                self.stale(check, now + SKEW, "a request signed 6 minutes ahead")
                    .await
            }
            Check::BodyOverLimit => {
                let limit = self.target.body_limit();
                let event = TestEvent::padded(self.target.event_type(), check, limit + 1);
                let request = Request::event(&event, Some(signature(all, now, &event.body)));
                let expect = Expect::Refuse {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    what: "an event one byte over the body limit",
                    unauthentic: false,
                };
                self.graded(check, expect, request).await
            }
            Check::NotJson => {
                let body = b"kxp check: an authentic body that is not JSON".to_vec();
                let request = Request::body(body.clone(), Some(signature(all, now, &body)));
                let expect = Expect::Refuse {
                    status: StatusCode::BAD_REQUEST,
                    what: "an authentic body that is not JSON",
                    unauthentic: false,
                };
                self.graded(check, expect, request).await
            }
            Check::Challenge if !self.target.challenge() => Finding::new(
                check,
                Verdict::Skip,
                "not run: the challenge was not asked for",
            ),
            Check::Challenge => {
                let token = random_hex(16);
                let exchange = self.send(Request::challenge(token.clone())).await;
                let (verdict, summary) = grade_challenge(&exchange, &token);
                finding(check, verdict, summary, exchange)
            }
            Check::Rotation => self.rotation().await,
            Check::Burst => self.burst().await,
        }
    }

    /// A fresh test event for `check`.
    fn event(&self, check: Check) -> TestEvent {
        TestEvent::new(self.target.event_type(), check)
    }

    async fn send(&mut self, request: Request) -> Exchange {
        self.requests += 1;
        exchange::send(self.target, request).await
    }

    async fn graded(&mut self, check: Check, expect: Expect, request: Request) -> Finding {
        let exchange = self.send(request).await;
        let (verdict, summary) = grade(expect, &exchange);
        finding(check, verdict, summary, exchange)
    }

    /// A fresh event under `signature`, which must be answered 401.
    async fn refused(
        &mut self,
        check: Check,
        what: &'static str,
        signature: Option<String>,
    ) -> Finding {
        let event = self.event(check);
        self.graded(check, unauthentic(what), Request::event(&event, signature))
            .await
    }

    /// A fresh event signed with every secret at `t`, outside the tolerance: 401.
    async fn stale(&mut self, check: Check, t: u64, what: &'static str) -> Finding {
        let event = self.event(check);
        let header = signature(self.target.secrets(), t, &event.body);
        self.graded(
            check,
            unauthentic(what),
            Request::event(&event, Some(header)),
        )
        .await
    }

    /// One event, delivered twice with the same bytes (signed afresh, as a retry is): both 2xx.
    async fn duplicate(&mut self) -> Finding {
        let check = Check::DuplicateEvent;
        let event = self.event(check);
        let target = self.target;
        let delivery = |attempt| {
            let header = signature(target.secrets(), unix_now(), &event.body);
            Request::event(&event, Some(header)).attempt(attempt)
        };
        let first = delivery(1);
        let first = self.send(first).await;
        if let (Verdict::Fail(severity), summary) = grade(Expect::Accept, &first) {
            let summary = format!("the first delivery {summary}, so no duplicate was sent");
            return finding(check, Verdict::Fail(severity), summary, first);
        }
        let again = delivery(2);
        let again = self.send(again).await;
        let (verdict, summary) = grade(Expect::Accept, &again);
        finding(
            check,
            verdict,
            format!("the same event again {summary}"),
            again,
        )
    }

    /// One event per secret, signed with that secret alone: each 2xx.
    async fn rotation(&mut self) -> Finding {
        let check = Check::Rotation;
        let target = self.target;
        let count = target.secrets().len();
        if count < 2 {
            return Finding::new(
                check,
                Verdict::Skip,
                "not run: needs the secrets of a rotation, newest first",
            );
        }
        let mut last = None;
        for (n, secret) in target.secrets().iter().enumerate() {
            let event = self.event(check);
            let header = signature([secret], unix_now(), &event.body);
            let exchange = self.send(Request::event(&event, Some(header))).await;
            let (verdict, summary) = grade(Expect::Accept, &exchange);
            if verdict != Verdict::Pass {
                let summary = format!("signed with secret {} of {count} only: {summary}", n + 1);
                return finding(check, verdict, summary, exchange);
            }
            last = Some(exchange);
        }
        let summary = format!("each of the {count} secrets alone is accepted");
        match last {
            Some(exchange) => finding(check, Verdict::Pass, summary, exchange),
            None => Finding::new(check, Verdict::Pass, summary),
        }
    }

    /// Distinct events, [`BURST_CONCURRENCY`] at a time: every one 2xx within the timeout.
    async fn burst(&mut self) -> Finding {
        let check = Check::Burst;
        let total = self.target.burst();
        let target = self.target;
        let exchanges: Vec<Exchange> = stream::iter(0..total)
            .map(|_| async move {
                let event = TestEvent::new(target.event_type(), check);
                let header = signature(target.secrets(), unix_now(), &event.body);
                let request = Request::event(&event, Some(header)).keep_alive();
                exchange::send(target, request).await
            })
            .buffer_unordered(BURST_CONCURRENCY)
            .collect()
            .await;
        self.requests += exchanges.len();

        let latency = Latency::of(
            exchanges
                .iter()
                .filter(|e| e.received.status.is_some())
                .map(|e| e.received.latency)
                .collect(),
        );
        let failed: Vec<&Exchange> = exchanges
            .iter()
            .filter(|e| grade(Expect::Accept, e).0 != Verdict::Pass)
            .collect();
        let mut result = match failed.first() {
            Some(first) => {
                let summary = format!(
                    "{} of {total} not answered 2xx within the timeout; the first {}",
                    failed.len(),
                    grade(Expect::Accept, first).1
                );
                finding(
                    check,
                    Verdict::Fail(Severity::Error),
                    summary,
                    (*first).clone(),
                )
            }
            None => {
                let summary = match latency {
                    Some(l) => format!(
                        "{total} of {total} answered 2xx: p50 {}, p95 {}, max {}",
                        ms(l.p50),
                        ms(l.p95),
                        ms(l.max)
                    ),
                    None => format!("{total} of {total} answered 2xx"),
                };
                let slowest = exchanges.into_iter().max_by_key(|e| e.received.latency);
                match slowest {
                    Some(slowest) => finding(check, Verdict::Pass, summary, slowest),
                    None => Finding::new(check, Verdict::Pass, summary),
                }
            }
        };
        result.latency = latency;
        result
    }
}

/// A request that is not authentic must be answered 401; a 2xx is critical.
fn unauthentic(what: &'static str) -> Expect {
    Expect::Refuse {
        status: StatusCode::UNAUTHORIZED,
        what,
        unauthentic: true,
    }
}

fn finding(check: Check, verdict: Verdict, summary: String, exchange: Exchange) -> Finding {
    Finding::new(check, verdict, summary).with_exchange(exchange.sent, exchange.received)
}

/// `3.2 ms`.
fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}
