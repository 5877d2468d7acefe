//! One message, whatever its broker: its account, its idempotency key, and what becomes of it
//! ([`Verdict`]) once it has been through the service's [`accept`], which `POST /v1/events`
//! uses too.

use std::time::Duration;

use kxp_api::{TRACEPARENT, TRACESTATE};

use super::Run;
use crate::app::{AppState, Error, REQUEST_OVERHEAD, accept, is_idempotency_key};
use crate::engine::backlog::RETRY_AFTER_SECS;
use crate::engine::sources::broker::{Claim, Delivery, Verdict, stopping};
use crate::engine::sources::{AccountHeader, IngestSource, RejectReason, SourceStatus};
use crate::engine::traces::Source;
use crate::model::{Account, AccountId, Trace, sha256_hex};

/// The longest wait between two tries of a message the database could not take.
const MAX_STORE_RETRY: Duration = Duration::from_secs(5);

/// The most of a rejection's explanation kept for the log and a NATS header.
const MAX_DETAIL: usize = 512;

/// The idempotency key of a message: the broker's id for it when that can be a key as it is
/// (1 to 255 printable ASCII characters); a hash of it when not; and `identity()` (a
/// broker-specific identity, stable across redeliveries) when it has none.
pub(crate) fn key(id: Option<&str>, prefix: &str, identity: impl FnOnce() -> String) -> String {
    match id {
        Some(id) if is_idempotency_key(id) => id.to_owned(),
        Some(id) => format!("{prefix}-id:{}", sha256_hex(id.as_bytes())),
        None => format!("{prefix}:{}", identity()),
    }
}

/// Takes `message` in. Errors that may pass (the backlog is full, the database is down) hold
/// it: the broker is told ([`Delivery::hold`]) and it is tried again, until it is stored,
/// rejected, or `stopped` is set.
pub(super) async fn take(run: &Run, message: &dyn Delivery) -> Verdict {
    let (state, source, status) = (&run.state, &run.source, &run.status);
    let body = message.body();
    if let Err((reason, detail)) = check_length(body, state.shared.config.max_event_data) {
        return rejected(status, reason, detail);
    }
    let key = key(message.id(), message.broker(), || message.identity());
    let producer = Trace::from_headers(message.header(TRACEPARENT), message.header(TRACESTATE));
    let mut stopped = run.stopped.clone();
    let mut store_wait = Duration::from_millis(100);
    let mut account: Option<Account> = None;
    loop {
        let tried = match &account {
            Some(account) => accept(
                state,
                account,
                body,
                Some(&key),
                producer.clone(),
                Source::Broker(message.broker()),
            )
            .await
            .map(|accepted| status.accepted(accepted.created))
            .map_err(|e| (Refused::of(&e), e.to_string())),
            None => match resolve(state, source, message.account()).await {
                Ok(found) => {
                    account = Some(found);
                    continue;
                }
                Err(Resolved::Rejected(reason, detail)) => {
                    return rejected(status, reason, detail);
                }
                Err(Resolved::Unavailable(detail)) => Err((Refused::Store, detail)),
            },
        };
        let (refused, detail) = match tried {
            Ok(()) => return Verdict::Accepted,
            Err(failure) => failure,
        };
        let pause = match refused {
            Refused::For(reason) => return rejected(status, reason, detail),
            Refused::Backlog => Duration::from_secs(RETRY_AFTER_SECS),
            Refused::Store => {
                tracing::warn!(target: "kxp_sender", source = %status.name, error = %detail,
                    "broker source: the message could not be stored; holding it and trying again");
                store_wait = (store_wait * 2).min(MAX_STORE_RETRY);
                store_wait
            }
        };
        message.hold().await;
        tokio::select! {
            () = stopping(&mut stopped) => return Verdict::Abandoned,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// What becomes of a message the service did not take in.
enum Refused {
    /// No retry can cure it: reject it, for this reason.
    For(RejectReason),
    /// The account's backlog is full: hold it for the `Retry-After` the API would give.
    Backlog,
    /// The database could not take it (or say whose it is): hold it, backing off.
    Store,
}

impl Refused {
    /// What the service's refusal of a message's event means for the message.
    fn of(error: &Error) -> Refused {
        Refused::For(match error {
            Error::InvalidJson(_) => RejectReason::InvalidJson,
            Error::Invalid(_) => RejectReason::InvalidRequest,
            Error::SchemaViolation { .. } => RejectReason::SchemaViolation,
            Error::TooLarge(_) => RejectReason::PayloadTooLarge,
            Error::KeyReused => RejectReason::IdempotencyKeyReused,
            Error::BacklogFull(_) => return Refused::Backlog,
            _ => return Refused::Store,
        })
    }
}

/// Refuses a body longer than `POST /v1/events` reads (the event limit, `max_event_data`,
/// plus [`REQUEST_OVERHEAD`]) by its length alone, before anything parses, hashes or copies
/// it, with the reason the API's `413` has: a broker hands over whatever it was given, and a
/// 30 MB message parsed whole costs hundreds of MB before its `data` could be measured.
fn check_length(body: &[u8], max_event_data: usize) -> Result<(), (RejectReason, String)> {
    let limit = max_event_data.saturating_add(REQUEST_OVERHEAD);
    if body.len() <= limit {
        return Ok(());
    }
    Err((
        RejectReason::PayloadTooLarge,
        format!(
            "the message is {} bytes; this server reads at most {limit} (max_event_bytes \
             {max_event_data} and {REQUEST_OVERHEAD} for the rest of the event)",
            body.len()
        ),
    ))
}

/// Why no account was found for a message.
enum Resolved {
    /// For good: the message names none, one it may not name, or one that does not exist.
    Rejected(RejectReason, String),
    /// The database could not say.
    Unavailable(String),
}

/// The message's account: its header's when the source lets the header name it ([`named`]),
/// else the source's.
async fn resolve(
    state: &AppState,
    source: &IngestSource,
    header: Claim<'_>,
) -> Result<Account, Resolved> {
    let id =
        named(source, header).map_err(|(reason, detail)| Resolved::Rejected(reason, detail))?;
    match state.db.account(&AccountId::from(id)).await {
        Ok(Some(account)) => Ok(account),
        Ok(None) => Err(Resolved::Rejected(
            RejectReason::UnknownAccount,
            format!("no account {}", printable(id)),
        )),
        Err(e) => Err(Resolved::Unavailable(e.to_string())),
    }
}

/// The id of the account a message is for, before anything looks it up: the header's when
/// the source reads it (`account_header=`) and the message has one, else the URL's. A header
/// that is not one string is refused, never passed over for the URL's account (its publisher
/// meant another one); so is an account outside the source's allow-list, unless it is the
/// URL's own.
fn named<'a>(
    source: &'a IngestSource,
    header: Claim<'a>,
) -> Result<&'a str, (RejectReason, String)> {
    let header = match (&source.account_header, header) {
        (AccountHeader::Ignored, _) | (_, Claim::Absent) => None,
        (_, Claim::Unreadable(what)) => {
            return Err((
                RejectReason::InvalidRequest,
                format!(
                    "the x-kxp-account header must be one string (an account id); it is {what}"
                ),
            ));
        }
        (AccountHeader::Any, Claim::Account(id)) => Some(id),
        (AccountHeader::Only(allowed), Claim::Account(id)) => {
            let own = source
                .account
                .as_ref()
                .is_some_and(|own| own.as_str() == id);
            if !own && !allowed.iter().any(|allowed| allowed.as_str() == id) {
                return Err((
                    RejectReason::AccountNotAllowed,
                    format!(
                        "the message names account {} in x-kxp-account; this source's \
                         account_header= does not allow it",
                        printable(id)
                    ),
                ));
            }
            Some(id)
        }
    };
    match (header, &source.account) {
        (Some(id), _) => Ok(id),
        (None, Some(own)) => Ok(own.as_str()),
        (None, None) => Err((
            RejectReason::AccountRequired,
            "the message has no x-kxp-account header and the source names no account".to_owned(),
        )),
    }
}

/// Records and logs a rejection, and says so.
fn rejected(status: &SourceStatus, reason: RejectReason, detail: String) -> Verdict {
    let detail = printable(&detail);
    status.rejected(reason);
    // The detail is not logged: parsers and schemas quote the message's values in it, and no
    // message body reaches the logs. It travels with the message (NATS's Kxp-Reject-Detail).
    tracing::warn!(target: "kxp_sender", source = %status.name, reason = reason.as_str(),
        "broker source: message rejected to the dead-letter path");
    Verdict::Rejected { reason, detail }
}

/// `text` on one line of printable characters, at most [`MAX_DETAIL`] bytes: a rejection's
/// explanation goes into logs and headers, and part of it may come from the message.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_DETAIL));
    for c in text.chars() {
        if out.len() + c.len_utf8() > MAX_DETAIL {
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

#[cfg(test)]
mod tests;
