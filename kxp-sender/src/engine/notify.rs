//! Telling merchants that an endpoint is in trouble: an operational webhook to the account's
//! ops URL, signed like any delivery with the account's ops secret, and an e-mail to its
//! contact address.
//!
//! Notifications go through an outbox (`kxp_notifications`): `queue_notices!` writes one row
//! per channel in the transaction that changes the endpoint's state, so each state change is
//! announced exactly once and a crash between the change and the announcement loses nothing.
//! [`run`] sends due rows under a lease and retries failures on the server's retry schedule;
//! a notice that still fails after the last try is marked `failed` and logged at error.
//! Delivery is at least once: a process killed between sending and recording sends again,
//! with the same `X-Kxp-Event-Id`, which a receiver's dedup absorbs.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use sqlx::FromRow;
use tokio::sync::{Notify, watch};

use crate::db::{Db, ms, new_id, now_ms, on_db};
use crate::dispatch::{self, GuardedClient, Outcome};
use crate::mail::Mailer;
use crate::schedule::{AfterFailure, Schedule};
use crate::store::{StoreError, rfc3339};

/// The endpoint, account and statistics a notice describes, read in the state change's
/// transaction. `$1` the endpoint.
pub(crate) const NOTICE_FACTS: &str = "SELECT p.id AS endpoint_id, p.account_id, p.url, p.description, p.status, \
       p.circuit_state, p.circuit_probe_at, a.ops_url, a.contact_email, a.default_api_version, \
       s.consecutive_failures, s.failing_since, s.last_error \
     FROM kxp_endpoints p JOIN kxp_accounts a ON a.id = p.account_id \
     LEFT JOIN kxp_endpoint_stats s ON s.endpoint_id = p.id WHERE p.id = $1";

/// A row of [`NOTICE_FACTS`].
#[derive(Debug, FromRow)]
pub(crate) struct NoticeFacts {
    pub endpoint_id: String,
    pub account_id: String,
    pub url: String,
    pub description: String,
    pub status: String,
    pub circuit_state: String,
    pub circuit_probe_at: Option<i64>,
    pub ops_url: Option<String>,
    pub contact_email: Option<String>,
    pub default_api_version: String,
    pub consecutive_failures: Option<i64>,
    pub failing_since: Option<i64>,
    pub last_error: Option<String>,
}

/// The `data` of a notice's envelope.
#[derive(Debug, Serialize)]
struct NoticeData<'a> {
    endpoint_id: &'a str,
    url: &'a str,
    description: &'a str,
    status: &'a str,
    circuit_state: &'a str,
    consecutive_failures: i64,
    failing_since: Option<String>,
    last_error: Option<&'a str>,
    next_probe_at: Option<String>,
}

/// The wire envelope of an operational webhook: the same shape as an event's.
#[derive(Debug, Serialize)]
struct NoticeEnvelope<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    api_version: &'a str,
    created_at: String,
    data: NoticeData<'a>,
}

impl NoticeFacts {
    /// The notice's event id and envelope bytes.
    pub(crate) fn envelope(&self, kind: &str, now: i64) -> (String, String) {
        let id = uuid::Uuid::new_v4().to_string();
        let envelope = NoticeEnvelope {
            id: &id,
            kind,
            api_version: &self.default_api_version,
            created_at: rfc3339(now),
            data: NoticeData {
                endpoint_id: &self.endpoint_id,
                url: &self.url,
                description: &self.description,
                status: &self.status,
                circuit_state: &self.circuit_state,
                consecutive_failures: self.consecutive_failures.unwrap_or(0),
                failing_since: self.failing_since.map(rfc3339),
                last_error: self.last_error.as_deref(),
                next_probe_at: self.circuit_probe_at.map(rfc3339),
            },
        };
        let payload = serde_json::to_string(&envelope).unwrap_or_default();
        (id, payload)
    }

    /// The channels the account has configured: `(channel, target)`.
    pub(crate) fn channels(&self) -> Vec<(&'static str, &str)> {
        let mut channels = Vec::new();
        if let Some(url) = self.ops_url.as_deref() {
            channels.push(("webhook", url));
        }
        if let Some(address) = self.contact_email.as_deref() {
            channels.push(("email", address));
        }
        channels
    }
}

/// Writes the notice `$kind` about the endpoint `$endpoint_id` to the outbox on the transaction
/// `$tx`, one row per configured channel. Evaluates to `Result<usize, sqlx::Error>`: the rows
/// written (0 when the account configured no channel: the change is still logged).
macro_rules! queue_notices {
    ($tx:expr, $kind:expr, $endpoint_id:expr, $now:expr) => {{
        async {
            let facts = sqlx::query_as::<_, $crate::notify::NoticeFacts>($crate::notify::NOTICE_FACTS)
                .bind($endpoint_id)
                .fetch_one(&mut *$tx)
                .await?;
            let (event_id, payload) = facts.envelope($kind, $now);
            let channels = facts.channels();
            for (channel, target) in &channels {
                sqlx::query(
                    "INSERT INTO kxp_notifications (id, account_id, endpoint_id, kind, channel, target, \
                     event_id, payload, status, attempts, next_attempt_at, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', 0, $9, $9, $9)",
                )
                .bind($crate::db::new_id("ntf"))
                .bind(&facts.account_id)
                .bind(&facts.endpoint_id)
                .bind($kind)
                .bind(*channel)
                .bind(*target)
                .bind(&event_id)
                .bind(&payload)
                .bind($now)
                .execute(&mut *$tx)
                .await?;
            }
            if channels.is_empty() {
                tracing::warn!(
                    target: "kxp_sender", endpoint_id = %facts.endpoint_id, account_id = %facts.account_id,
                    kind = $kind, "the account has no ops URL or contact address: nobody is notified"
                );
            }
            Ok::<_, sqlx::Error>(channels.len())
        }
        .await
    }};
}
pub(crate) use queue_notices;

/// One row of the outbox.
#[derive(Debug, Clone, FromRow, Serialize)]
pub struct Notification {
    /// `ntf_…`
    pub id: String,
    /// The owner.
    #[serde(skip)]
    pub account_id: String,
    /// The endpoint it is about.
    pub endpoint_id: String,
    /// `endpoint.circuit_opened` or `endpoint.disabled`.
    pub kind: String,
    /// `webhook` or `email`.
    pub channel: String,
    /// The ops URL or the address it goes to.
    pub target: String,
    /// The notice's event id, shared by its channels (`X-Kxp-Event-Id` of the webhook).
    pub event_id: String,
    /// The webhook's envelope bytes.
    #[serde(skip)]
    pub payload: String,
    /// `pending`, `sent` or `failed`.
    pub status: String,
    /// Tries so far.
    pub attempts: i64,
    /// Why the last try failed.
    pub last_error: Option<String>,
    /// Unix ms.
    #[serde(skip)]
    pub created_at: i64,
}

const NOTIFICATION_COLUMNS: &str = "id, account_id, endpoint_id, kind, channel, target, event_id, payload, status, attempts, last_error, created_at";

impl Db {
    /// Leases the next due notification to `owner` for `lease_ms`; e-mail ones only when
    /// `email` (this process can send e-mail), so a process without an SMTP server leaves them
    /// to one that has.
    pub async fn claim_notification(
        &self,
        owner: &str,
        lease_ms: i64,
        email: bool,
    ) -> Result<Option<Notification>, StoreError> {
        let now = now_ms();
        // The lease test is repeated outside the subquery: on PostgreSQL, a second process that
        // waited for the row re-checks it against the row the first one wrote, and skips it.
        let sql = format!(
            "UPDATE kxp_notifications SET lease_until = $2, lease_owner = $3, updated_at = $1 \
             WHERE id IN (SELECT id FROM kxp_notifications WHERE status = 'pending' AND next_attempt_at <= $1 \
               AND (lease_until IS NULL OR lease_until < $1) AND (channel <> 'email' OR $4 = 1) \
               ORDER BY next_attempt_at LIMIT 1) \
             AND status = 'pending' AND (lease_until IS NULL OR lease_until < $1) \
             RETURNING {NOTIFICATION_COLUMNS}"
        );
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Notification>(&sql)
                .bind(now)
                .bind(now.saturating_add(lease_ms))
                .bind(owner)
                .bind(i64::from(email))
                .fetch_optional(pool)
                .await?
        }))
    }

    /// Records a try of a notification — sent, retried at a time, or failed for good — if
    /// `owner` still holds its lease (else another notifier took it over, and its outcome
    /// stands).
    pub async fn finish_notification(
        &self,
        id: &str,
        owner: &str,
        attempts: i64,
        next: NoticeNext,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let (status, next_at) = match next {
            NoticeNext::Sent => ("sent", now),
            NoticeNext::RetryAt(at) => ("pending", at),
            NoticeNext::Failed => ("failed", now),
        };
        on_db!(self, |pool, _begin| {
            sqlx::query(
                "UPDATE kxp_notifications SET status = $1, attempts = $2, next_attempt_at = $3, \
                 lease_until = NULL, lease_owner = NULL, last_error = $4, updated_at = $5 \
                 WHERE id = $6 AND lease_owner = $7",
            )
            .bind(status)
            .bind(attempts)
            .bind(next_at)
            .bind(error)
            .bind(now)
            .bind(id)
            .bind(owner)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// A page of the account's notifications, oldest first, after `cursor`.
    pub async fn notifications(
        &self,
        account_id: &str,
        cursor: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Notification>, StoreError> {
        let sql = format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM kxp_notifications WHERE account_id = $1 AND id > $2 \
             ORDER BY id LIMIT $3"
        );
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_as::<_, Notification>(&sql)
                .bind(account_id)
                .bind(cursor.unwrap_or(""))
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    /// The account's ops secret: what operational webhooks are signed with.
    async fn ops_secret(&self, account_id: &str) -> Result<Option<String>, StoreError> {
        Ok(on_db!(self, |pool, _begin| {
            sqlx::query_scalar::<_, Option<String>>(
                "SELECT ops_secret FROM kxp_accounts WHERE id = $1",
            )
            .bind(account_id)
            .fetch_optional(pool)
            .await?
            .flatten()
        }))
    }
}

/// What a try of a notification leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeNext {
    /// Done.
    Sent,
    /// Try again at this Unix ms.
    RetryAt(i64),
    /// The last try failed.
    Failed,
}

/// How the notifier sends.
#[derive(Debug, Clone)]
pub struct Notifier {
    /// Operational webhooks go through the same guarded client as deliveries.
    pub client: GuardedClient,
    /// E-mail, when an SMTP server is configured.
    pub mailer: Option<Mailer>,
    /// When failed notifications are tried again.
    pub schedule: Schedule,
    /// Timeout of one webhook try.
    pub timeout: Duration,
    /// Development mode: `https` → `http` redirects allowed.
    pub dev: bool,
    /// How often to look for due notifications when nothing wakes the loop sooner.
    pub poll_interval: Duration,
    /// This process's counters.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Sends due notifications until `shutdown` turns true.
pub async fn run(
    db: Db,
    notifier: Notifier,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    if notifier.mailer.is_none() {
        tracing::info!(target: "kxp_sender", "no SMTP server configured (--smtp-url): this process sends no e-mail notifications");
    }
    let owner = new_id("nfy");
    // One notification at a time, leased for far longer than one try can take (a webhook ends
    // within its timeout, an SMTP exchange within a few of lettre's 10 s steps).
    let lease = ms(notifier.timeout) + 120_000;
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
            Some(notification) => send_one(&db, &notifier, &owner, &notification).await,
            None => {
                tokio::select! {
                    _ = tokio::time::sleep(notifier.poll_interval) => {}
                    _ = wake.notified() => {}
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
}

impl Failure {
    fn retry(error: impl Into<String>) -> Failure {
        Failure {
            error: error.into(),
            hopeless: false,
        }
    }
}

async fn send_one(db: &Db, notifier: &Notifier, owner: &str, n: &Notification) {
    let attempts = n.attempts + 1;
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
        }),
    };
    let next = match &result {
        Ok(()) => NoticeNext::Sent,
        Err(failure) if failure.hopeless => NoticeNext::Failed,
        Err(_) => {
            let made = u32::try_from(attempts).unwrap_or(u32::MAX);
            match notifier.schedule.after_failure(made, 0.5, None) {
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
        .finish_notification(&n.id, owner, attempts, next, error)
        .await
    {
        // The lease runs out and the notification is tried again: at least once.
        tracing::error!(target: "kxp_sender", notification_id = %n.id, error = %e, "recording a notification failed");
    }
}

async fn webhook(
    db: &Db,
    notifier: &Notifier,
    n: &Notification,
    attempt: i64,
) -> Result<(), Failure> {
    let secret = match db.ops_secret(&n.account_id).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(Failure {
                error: "ops_url_removed: the account no longer has an ops URL".to_owned(),
                hopeless: true,
            });
        }
        Err(e) => return Err(Failure::retry(e.to_string())),
    };
    let secrets = [secret];
    let request = dispatch::Request {
        url: &n.target,
        payload: &n.payload,
        event_id: &n.event_id,
        event_type: &n.kind,
        delivery_id: &n.id,
        attempt,
        secrets: &secrets,
        timeout: notifier.timeout,
        allow_http: notifier.dev,
    };
    match dispatch::send(&notifier.client, &request).await.0 {
        Outcome::Delivered { .. } => Ok(()),
        Outcome::Rejected { status, .. } => Err(Failure::retry(format!("http_{status}"))),
        Outcome::Failed { error } => Err(Failure::retry(error)),
    }
}

/// The subject and plain-text body of a notice's e-mail, from its envelope.
pub fn email_text(n: &Notification) -> (String, String) {
    let envelope: Value = serde_json::from_str(&n.payload).unwrap_or(Value::Null);
    let data = &envelope["data"];
    let field = |name: &str| data[name].as_str().unwrap_or("-").to_owned();
    let url = field("url");
    let facts = format!(
        "Endpoint:    {endpoint} ({url})\n\
         Failing since: {since}\n\
         Consecutive failed attempts: {failures}\n\
         Last error:  {error}\n",
        endpoint = n.endpoint_id,
        since = field("failing_since"),
        failures = data["consecutive_failures"].as_i64().unwrap_or(0),
        error = field("last_error"),
    );
    match n.kind.as_str() {
        "endpoint.disabled" => (
            format!("[kxp] Endpoint disabled: {url}"),
            format!(
                "Your webhook endpoint has failed every delivery attempt for too long, so it has \
                 been disabled.\n\n{facts}\n\
                 Nothing is lost: new events keep queueing for it, held. Once the endpoint works \
                 again, resume it (POST /v1/endpoints/{id}/resume) and the backlog is delivered at \
                 its rate limit.\n",
                id = n.endpoint_id
            ),
        ),
        _ => (
            format!("[kxp] Endpoint failing, deliveries paused: {url}"),
            format!(
                "Deliveries to your webhook endpoint keep failing, so its circuit breaker has \
                 opened: deliveries are held (they use up no retries) and the endpoint is probed \
                 with one delivery from {probe}.\n\n{facts}\n\
                 Nothing is lost. As soon as a probe succeeds, the held deliveries are sent at the \
                 endpoint's rate limit. If it keeps failing, the endpoint will be disabled.\n",
                probe = field("next_probe_at")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> NoticeFacts {
        NoticeFacts {
            endpoint_id: "ep_1".into(),
            account_id: "acc_1".into(),
            url: "https://shop.example/hooks".into(),
            description: "orders".into(),
            status: "active".into(),
            circuit_state: "open".into(),
            circuit_probe_at: Some(1_800_000_060_000),
            ops_url: Some("https://shop.example/ops".into()),
            contact_email: Some("ops@shop.example".into()),
            default_api_version: "2026-11-01".into(),
            consecutive_failures: Some(10),
            failing_since: Some(1_800_000_000_000),
            last_error: Some("http_503".into()),
        }
    }

    #[test]
    fn the_envelope_is_an_event_envelope() {
        let (id, payload) = facts().envelope("endpoint.circuit_opened", 1_800_000_001_000);
        let v: Value = serde_json::from_str(&payload).unwrap();
        assert_eq!(v["id"], id.as_str());
        assert_eq!(v["type"], "endpoint.circuit_opened");
        assert_eq!(v["api_version"], "2026-11-01");
        assert_eq!(v["data"]["endpoint_id"], "ep_1");
        assert_eq!(v["data"]["consecutive_failures"], 10);
        assert_eq!(v["data"]["last_error"], "http_503");
        assert_eq!(v["data"]["failing_since"], "2027-01-15T08:00:00Z");
        assert_eq!(v["data"]["next_probe_at"], "2027-01-15T08:01:00Z");
    }

    #[test]
    fn channels_follow_the_account() {
        assert_eq!(facts().channels().len(), 2);
        let none = NoticeFacts {
            ops_url: None,
            contact_email: None,
            ..facts()
        };
        assert!(none.channels().is_empty());
    }

    #[test]
    fn the_email_says_what_happened_and_what_to_do() {
        let (_, payload) = facts().envelope("endpoint.disabled", 1_800_000_001_000);
        let n = Notification {
            id: "ntf_1".into(),
            account_id: "acc_1".into(),
            endpoint_id: "ep_1".into(),
            kind: "endpoint.disabled".into(),
            channel: "email".into(),
            target: "ops@shop.example".into(),
            event_id: "e".into(),
            payload,
            status: "pending".into(),
            attempts: 0,
            last_error: None,
            created_at: 0,
        };
        let (subject, body) = email_text(&n);
        assert_eq!(
            subject,
            "[kxp] Endpoint disabled: https://shop.example/hooks"
        );
        assert!(body.contains("POST /v1/endpoints/ep_1/resume"), "{body}");
        assert!(body.contains("http_503"), "{body}");
        assert!(body.contains("Nothing is lost"), "{body}");
    }
}
