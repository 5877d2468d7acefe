//! Telling merchants that an endpoint is in trouble: an operational webhook to the account's
//! ops URL, signed like any delivery with the account's ops secret, and an e-mail to its
//! contact address.
//!
//! Notifications go through an outbox (`kxp_notifications`): `store::notifications::queue_notices` writes one row
//! per channel in the transaction that changes the endpoint's state, so each state change is
//! announced exactly once and a crash between the change and the announcement loses nothing.
//! [`run`] sends due rows under a lease and retries failures on the server's retry schedule;
//! a notice that still fails after the last try is marked `failed` and logged at error.
//! Delivery is at least once: a process killed between sending and recording sends again,
//! with the same `X-Kxp-Event-Id`, which a receiver's dedup absorbs.

use std::sync::Arc;

use tokio::sync::watch;

use crate::engine::config::Shared;
use crate::engine::dispatch::{self, Outcome};
use crate::model::{FailureKind, Material, NoticeNext, Notification, ms, new_id, now_ms};
use crate::policy::notice::email_text;
use crate::policy::schedule::AfterFailure;
use crate::store::Db;

/// Sends due notifications until `shutdown` turns true.
pub(crate) async fn run(db: Db, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let notifier = &*shared;
    if notifier.mailer.is_none() {
        tracing::info!(target: "kxp_sender", "no SMTP server configured (--smtp-url): this process sends no e-mail notifications");
    }
    let owner = new_id("nfy");
    // One notification at a time, leased for far longer than one try can take (a webhook ends
    // within its timeout, an SMTP exchange within a few of lettre's 10 s steps).
    let lease = ms(notifier.config.delivery_timeout) + 120_000;
    while !*shutdown.borrow() {
        let due = match db
            .claim_notification(&owner, lease, notifier.mailer.is_some())
            .await
        {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(target: "kxp_sender", error = %e, "claiming notifications failed");
                None
            }
        };
        match due {
            Some(notification) => send_one(&db, notifier, &owner, &notification).await,
            None => {
                tokio::select! {
                    _ = tokio::time::sleep(notifier.config.poll_interval) => {}
                    _ = notifier.notices.notified() => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }
}

/// Why a try failed, and whether another could succeed.
struct Failure {
    error: String,
    hopeless: bool,
    /// The egress proxy failed: the try does not count, and is made again once it is back.
    held: bool,
}

impl Failure {
    fn retry(error: impl Into<String>) -> Failure {
        Failure {
            error: error.into(),
            hopeless: false,
            held: false,
        }
    }
}

/// How soon a webhook the egress proxy failed is tried again (not counted: e-mail does not go
/// through the proxy, so the loop goes on while it fails).
const HELD_RETRY_MS: i64 = 1000;

async fn send_one(db: &Db, notifier: &Shared, owner: &str, n: &Notification) {
    let mut attempts = n.attempts + 1;
    let result = match n.channel.as_str() {
        "webhook" => webhook(db, notifier, n, attempts).await,
        "email" => match &notifier.mailer {
            Some(mailer) => {
                let (subject, body) = email_text(n);
                mailer
                    .send(&n.target, &subject, &body)
                    .await
                    .map_err(|e| Failure::retry(e.to_string()))
            }
            // Not claimed by a process without a mailer.
            None => Err(Failure::retry("smtp_not_configured")),
        },
        other => Err(Failure {
            error: format!("unknown channel {other}"),
            hopeless: true,
            held: false,
        }),
    };
    let next = match &result {
        Ok(()) => NoticeNext::Sent,
        Err(failure) if failure.hopeless => NoticeNext::Failed,
        Err(failure) if failure.held => {
            attempts = n.attempts;
            NoticeNext::RetryAt(now_ms().saturating_add(HELD_RETRY_MS))
        }
        Err(_) => {
            let made = u32::try_from(attempts).unwrap_or(u32::MAX);
            match notifier.config.schedule.after_failure(made, 0.5, None) {
                AfterFailure::RetryIn(delay) => {
                    NoticeNext::RetryAt(now_ms().saturating_add(ms(delay)))
                }
                AfterFailure::Dead => NoticeNext::Failed,
            }
        }
    };
    match (&result, next) {
        (Ok(()), _) => tracing::info!(
            target: "kxp_sender", notification_id = %n.id, endpoint_id = %n.endpoint_id, kind = %n.kind,
            channel = %n.channel, "merchant notified"
        ),
        (Err(e), NoticeNext::Failed) => tracing::error!(
            target: "kxp_sender", notification_id = %n.id, endpoint_id = %n.endpoint_id, kind = %n.kind,
            channel = %n.channel, attempts, error = %e.error, "notifying the merchant failed for good"
        ),
        // Like a failed delivery attempt: routine until the last try.
        (Err(e), _) => tracing::info!(
            target: "kxp_sender", notification_id = %n.id, endpoint_id = %n.endpoint_id, kind = %n.kind,
            channel = %n.channel, attempts, error = %e.error, "notifying the merchant failed; will retry"
        ),
    }
    match next {
        NoticeNext::Sent => notifier.metrics.notice(&n.channel, true),
        NoticeNext::Failed => notifier.metrics.notice(&n.channel, false),
        NoticeNext::RetryAt(_) => {}
    }
    let error = result.as_ref().err().map(|e| e.error.as_str());
    if let Err(e) = db
        .finish_notification(n, owner, attempts, next, error)
        .await
    {
        // The lease runs out and the notification is tried again: at least once.
        tracing::error!(target: "kxp_sender", notification_id = %n.id, error = %e, "recording a notification failed");
    }
}

async fn webhook(
    db: &Db,
    notifier: &Shared,
    n: &Notification,
    attempt: i64,
) -> Result<(), Failure> {
    let ring = notifier.config.secrets_key.as_ref();
    let secret = match db.ops_secret(&n.account_id, ring).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(Failure {
                error: "ops_url_removed: the account no longer has an ops URL".to_owned(),
                hopeless: true,
                held: false,
            });
        }
        Err(e) => return Err(Failure::retry(e.to_string())),
    };
    let secrets: Vec<Material> = Material::parse(&secret).into_iter().collect();
    let request = dispatch::Request {
        url: &n.target,
        payload: &n.payload,
        event_id: n.event_id.as_str(),
        event_type: &n.kind,
        delivery_id: n.id.as_str(),
        attempt,
        endpoint_id: None,
        sequence: None,
        traceparent: None,
        secrets: &secrets,
        credentials: &[],
        timeout: notifier.config.delivery_timeout,
        allow_http: notifier.config.dev,
    };
    match dispatch::send(&notifier.client, &request).await.0 {
        Outcome::Delivered { .. } => Ok(()),
        Outcome::Rejected { status, .. } => Err(Failure::retry(format!("http_{status}"))),
        Outcome::Failed(failure) => Err(Failure {
            held: failure.kind == FailureKind::ProxyError,
            ..Failure::retry(failure.to_string())
        }),
    }
}
