//! The checks by name: what each sends, what it expects back, why it matters, and where the
//! receiving guide explains the fix. How a check is run lives in `run`; how an answer is graded,
//! in `grade`.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

/// Where [`Check::docs_url`] points: the "Check your endpoint" section of the receiving guide,
/// which has one anchor per check (`#check-<name>`).
const GUIDE: &str = concat!(
    env!("CARGO_PKG_REPOSITORY"),
    "/blob/main/docs/receiving-webhooks.md"
);

/// One check of the receiver contract, under a stable snake_case name (`--only`, `--skip`, the
/// JSON report, the guide's anchors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Check {
    /// `valid_event`: a valid, signed test event is answered 2xx within the timeout.
    ValidEvent,
    /// `duplicate_event`: the same event again (same id, same bytes, signed afresh, as a retry
    /// is) is answered 2xx too.
    DuplicateEvent,
    /// `forged_signature`: a `v1` of random hex digits is answered 401.
    ForgedSignature,
    /// `wrong_secret`: a signature made with a secret that is not the endpoint's is answered 401.
    WrongSecret,
    /// `missing_header`: no `X-Kxp-Signature` at all is answered 401.
    MissingHeader,
    /// `malformed_header`: an `X-Kxp-Signature` that does not parse is answered 401.
    MalformedHeader,
    /// `timestamp_too_old`: an authentic request signed 6 minutes ago is answered 401.
    TimestampTooOld,
    /// `timestamp_in_future`: an authentic request signed 6 minutes ahead is answered 401.
    TimestampInFuture,
    /// `body_over_limit`: an authentic event one byte over the body limit is answered 413.
    BodyOverLimit,
    /// `not_json`: an authentic body that is not JSON is answered 400.
    NotJson,
    /// `challenge`: `GET ?challenge=<token>` is answered 200 with the token as the whole body.
    Challenge,
    /// `rotation`: an event signed with only one of the configured secrets, for each of them, is
    /// answered 2xx.
    Rotation,
    /// `burst`: a burst of distinct events, a few at a time, is answered 2xx, each within the
    /// timeout; the report gives the response-time percentiles.
    Burst,
}

impl Check {
    /// Every check, in the order [`run`](crate::run) runs them.
    pub const ALL: [Check; 13] = [
        Check::ValidEvent,
        Check::DuplicateEvent,
        Check::ForgedSignature,
        Check::WrongSecret,
        Check::MissingHeader,
        Check::MalformedHeader,
        Check::TimestampTooOld,
        Check::TimestampInFuture,
        Check::BodyOverLimit,
        Check::NotJson,
        Check::Challenge,
        Check::Rotation,
        Check::Burst,
    ];

    /// The stable snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            Check::ValidEvent => "valid_event",
            Check::DuplicateEvent => "duplicate_event",
            Check::ForgedSignature => "forged_signature",
            Check::WrongSecret => "wrong_secret",
            Check::MissingHeader => "missing_header",
            Check::MalformedHeader => "malformed_header",
            Check::TimestampTooOld => "timestamp_too_old",
            Check::TimestampInFuture => "timestamp_in_future",
            Check::BodyOverLimit => "body_over_limit",
            Check::NotJson => "not_json",
            Check::Challenge => "challenge",
            Check::Rotation => "rotation",
            Check::Burst => "burst",
        }
    }

    /// Why it matters, in one line: what goes wrong in production when this check fails.
    pub const fn why(self) -> &'static str {
        match self {
            Check::ValidEvent => {
                "the sender retries anything but a 2xx within its timeout: a failing or slow \
                 endpoint gets each event again and again, then loses it to the dead-letter queue"
            }
            Check::DuplicateEvent => {
                "delivery is at least once: retries and replays resend an event, and an error for \
                 a duplicate makes the sender retry it until it goes dead"
            }
            Check::ForgedSignature => {
                "anyone who finds the URL could post a fake payment.succeeded and have the order \
                 shipped"
            }
            Check::WrongSecret => {
                "a request signed with another key is a forgery: verifying with the wrong key, or \
                 not comparing at all, lets anyone sign"
            }
            Check::MissingHeader => {
                "skipping verification when the header is absent is the classic fail-open bug: \
                 an unsigned request must never be processed"
            }
            Check::MalformedHeader => {
                "a header that does not parse must be refused, not waved through: a parser that \
                 fails open lets anyone in"
            }
            Check::TimestampTooOld => {
                "without the timestamp check, a captured request can be replayed for ever"
            }
            Check::TimestampInFuture => {
                "a timestamp far ahead lets a captured request be replayed later, and means a \
                 clock is wrong"
            }
            Check::BodyOverLimit => {
                "without a body limit, one huge request can exhaust the receiver's memory"
            }
            Check::NotJson => {
                "a 2xx tells the sender an event was processed: a body that is not an event must \
                 be refused, and must not crash the handler"
            }
            Check::Challenge => {
                "the sender registers an endpoint only once it echoes the challenge token"
            }
            Check::Rotation => {
                "during a secret rotation either secret may sign: an endpoint that knows only one \
                 drops deliveries and cannot rotate without downtime"
            }
            Check::Burst => {
                "deliveries come in bursts: an answer slower than the timeout is a failed attempt, \
                 retried, which adds to the load"
            }
        }
    }

    /// The section of `docs/receiving-webhooks.md` that explains this check and how to fix a
    /// failure.
    pub fn docs_url(self) -> String {
        format!("{GUIDE}#check-{}", self.name())
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`Check::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown check `{name}`; the checks are: {}", names())]
pub struct UnknownCheck {
    /// The name given.
    pub name: String,
}

fn names() -> String {
    Check::ALL.map(Check::name).join(", ")
}

impl FromStr for Check {
    type Err = UnknownCheck;

    fn from_str(name: &str) -> Result<Check, UnknownCheck> {
        Check::ALL
            .into_iter()
            .find(|check| check.name() == name)
            .ok_or_else(|| UnknownCheck {
                name: name.to_owned(),
            })
    }
}

impl Serialize for Check {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_check() {
        for check in Check::ALL {
            assert_eq!(check.name().parse::<Check>(), Ok(check));
        }
        let unknown = "valid-event".parse::<Check>().unwrap_err();
        assert!(unknown.to_string().contains("valid_event, duplicate_event"));
    }

    /// The report links to `#check-<name>`: every check must have its anchor in the guide.
    #[test]
    fn every_check_has_its_anchor_in_the_receiving_guide() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/receiving-webhooks.md");
        let guide = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        for check in Check::ALL {
            let anchor = format!("<a id=\"check-{}\"></a>", check.name());
            assert!(guide.contains(&anchor), "{path} has no {anchor}");
            assert!(check.docs_url().ends_with(&format!("#check-{check}")));
        }
    }
}
