//! What an answer is worth: pure functions from an [`Exchange`] to a verdict and a one-line
//! summary, the contract's status table read from the receiver's side.
//!
//! - An event the endpoint must accept: any 2xx passes; anything else fails (`error`).
//! - A request it must refuse: the contract's status passes; another 4xx is refused all the same
//!   and only warns; a 2xx fails, `critical` when the request was not authentic; a redirect, a
//!   5xx or no answer fail (`error`).

use reqwest::StatusCode;

use crate::exchange::Exchange;
use crate::report::{Severity, Verdict};

/// What the contract asks of the answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expect {
    /// Any 2xx within the timeout.
    Accept,
    /// `status`; `what` names the request ("a forged signature"), `unauthentic` says whether
    /// accepting it means anyone could.
    Refuse {
        status: StatusCode,
        what: &'static str,
        unauthentic: bool,
    },
}

/// The verdict on `exchange` and what happened, in one line.
pub(crate) fn grade(expect: Expect, exchange: &Exchange) -> (Verdict, String) {
    let Some(status) = exchange.status() else {
        let error = exchange.received.error.clone().unwrap_or_default();
        return match expect {
            // The connection closed on a body over the limit: refused, though not with a 413.
            Expect::Refuse {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                ..
            } if !exchange.timed_out => (
                Verdict::Warn,
                format!(
                    "{error}: the body was refused, but with no 413 the sender cannot tell why"
                ),
            ),
            _ => (Verdict::Fail(Severity::Error), error),
        };
    };
    let answered = format!("answered {}", status_text(status));
    match expect {
        Expect::Accept if status.is_success() => (Verdict::Pass, answered),
        Expect::Accept if status.is_redirection() => (
            Verdict::Fail(Severity::Error),
            redirect(exchange, &answered),
        ),
        Expect::Accept => (
            Verdict::Fail(Severity::Error),
            format!("{answered}, not 2xx: the sender would retry this event"),
        ),
        Expect::Refuse { status: wanted, .. } if status == wanted => (Verdict::Pass, answered),
        Expect::Refuse {
            what, unauthentic, ..
        } if status.is_success() => {
            let severity = if unauthentic {
                Severity::Critical
            } else {
                Severity::Error
            };
            (
                Verdict::Fail(severity),
                format!("{answered} to {what}: it was accepted"),
            )
        }
        Expect::Refuse { status: wanted, .. } if status.is_client_error() => (
            Verdict::Warn,
            format!(
                "{answered}, not {}: refused, but the sender and your logs cannot tell why",
                wanted.as_u16()
            ),
        ),
        Expect::Refuse { .. } if status.is_redirection() => (
            Verdict::Fail(Severity::Error),
            redirect(exchange, &answered),
        ),
        Expect::Refuse {
            status: wanted,
            what,
            ..
        } => (
            Verdict::Fail(Severity::Error),
            format!("{answered} to {what}, not {}", wanted.as_u16()),
        ),
    }
}

/// The endpoint challenge: 200 with exactly the token passes; a 2xx with the token and trailing
/// whitespace is what the sender accepts too, so it only warns; anything else fails.
pub(crate) fn grade_challenge(exchange: &Exchange, token: &str) -> (Verdict, String) {
    let Some(status) = exchange.status() else {
        let error = exchange.received.error.clone().unwrap_or_default();
        return (Verdict::Fail(Severity::Error), error);
    };
    let answered = format!("answered {}", status_text(status));
    let body = exchange.body.as_str();
    if status == StatusCode::OK && body == token {
        (Verdict::Pass, format!("{answered} with the token"))
    } else if status.is_success() && body.trim_end() == token {
        (
            Verdict::Warn,
            format!("{answered} with the token and more: answer it alone, as text/plain"),
        )
    } else if status.is_redirection() {
        (
            Verdict::Fail(Severity::Error),
            redirect(exchange, &answered),
        )
    } else {
        (
            Verdict::Fail(Severity::Error),
            format!(
                "{answered} with a body of {} bytes, not the token",
                exchange.received.body_bytes
            ),
        )
    }
}

/// `answered 308 Permanent Redirect to <location>, which is not followed`.
fn redirect(exchange: &Exchange, answered: &str) -> String {
    let to = exchange
        .received
        .location
        .as_deref()
        .map_or_else(String::new, |l| format!(" to {l}"));
    format!("{answered}{to}, which is not followed: check the URL the redirect ends at")
}

/// `200 OK`, or just the number for a code without a standard reason.
pub(crate) fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::report::{Received, Sent};

    fn answered(status: u16, body: &str) -> Exchange {
        Exchange {
            sent: Sent {
                method: "POST",
                query: None,
                headers: BTreeMap::new(),
                body_bytes: 0,
                body: String::new(),
            },
            received: Received {
                status: Some(status),
                location: (300..400)
                    .contains(&status)
                    .then(|| "https://x.example/".into()),
                body: body.to_owned(),
                body_bytes: body.len(),
                latency: Duration::from_millis(3),
                error: None,
            },
            body: body.to_owned(),
            timed_out: false,
        }
    }

    fn no_answer(timed_out: bool) -> Exchange {
        let mut exchange = answered(200, "");
        exchange.received.status = None;
        exchange.received.error = Some("no answer: connection reset".to_owned());
        exchange.timed_out = timed_out;
        exchange
    }

    const FORGED: Expect = Expect::Refuse {
        status: StatusCode::UNAUTHORIZED,
        what: "a forged signature",
        unauthentic: true,
    };

    const TOO_LARGE: Expect = Expect::Refuse {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        what: "a body over the limit",
        unauthentic: false,
    };

    fn verdict(expect: Expect, exchange: Exchange) -> Verdict {
        grade(expect, &exchange).0
    }

    #[test]
    fn accepting_means_any_2xx() {
        assert_eq!(verdict(Expect::Accept, answered(200, "")), Verdict::Pass);
        assert_eq!(verdict(Expect::Accept, answered(204, "")), Verdict::Pass);
        for status in [302, 400, 401, 409, 500, 503] {
            assert_eq!(
                verdict(Expect::Accept, answered(status, "")),
                Verdict::Fail(Severity::Error),
                "{status}"
            );
        }
        assert_eq!(
            verdict(Expect::Accept, no_answer(true)),
            Verdict::Fail(Severity::Error)
        );
    }

    #[test]
    fn accepting_an_unauthentic_request_is_critical_and_another_refusal_warns() {
        assert_eq!(verdict(FORGED, answered(401, "")), Verdict::Pass);
        let (accepted, summary) = grade(FORGED, &answered(200, "ok"));
        assert_eq!(accepted, Verdict::Fail(Severity::Critical));
        assert_eq!(
            summary,
            "answered 200 OK to a forged signature: it was accepted"
        );
        assert_eq!(verdict(FORGED, answered(403, "")), Verdict::Warn);
        assert_eq!(verdict(FORGED, answered(400, "")), Verdict::Warn);
        for broken in [answered(500, ""), answered(307, ""), no_answer(false)] {
            assert_eq!(verdict(FORGED, broken), Verdict::Fail(Severity::Error));
        }
        let (_, summary) = grade(FORGED, &answered(307, ""));
        assert!(
            summary.contains("to https://x.example/, which is not followed"),
            "{summary}"
        );
    }

    #[test]
    fn accepting_an_authentic_but_unacceptable_body_is_an_error() {
        assert_eq!(verdict(TOO_LARGE, answered(413, "")), Verdict::Pass);
        assert_eq!(verdict(TOO_LARGE, answered(400, "")), Verdict::Warn);
        assert_eq!(
            verdict(TOO_LARGE, answered(200, "")),
            Verdict::Fail(Severity::Error)
        );
        // A connection closed on the oversized body refused it; a timeout did not answer at all.
        assert_eq!(verdict(TOO_LARGE, no_answer(false)), Verdict::Warn);
        assert_eq!(
            verdict(TOO_LARGE, no_answer(true)),
            Verdict::Fail(Severity::Error)
        );
    }

    #[test]
    fn the_challenge_wants_the_token_alone() {
        let token = "3f9a";
        let grade = |status, body| grade_challenge(&answered(status, body), token).0;
        assert_eq!(grade(200, "3f9a"), Verdict::Pass);
        assert_eq!(grade(200, "3f9a\n"), Verdict::Warn);
        assert_eq!(grade(204, "3f9a"), Verdict::Warn);
        for (status, body) in [(200, ""), (200, "{\"ok\":true}"), (401, "3f9a"), (302, "")] {
            assert_eq!(
                grade(status, body),
                Verdict::Fail(Severity::Error),
                "{status} {body}"
            );
        }
    }
}
