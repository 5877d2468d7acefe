//! The certificates watched: what a TLS handshake showed of an endpoint's own certificate, and
//! the expiry notices of it and of the client certificate the endpoint presents, each queued
//! once ([`policy::certificates`](crate::policy::certificates)) in the transaction that records
//! the certificate.

use kxp_api::{CertificateRole, ServerCertificate, Timestamp};

use crate::model::{CertificateNotice, CredentialsView, EndpointKey, NoticeDetail, rfc3339};
use crate::policy::certificates::{self, CLIENT_EXPIRING, SERVER_EXPIRING};
use crate::store::notifications::queue_notices;
use crate::store::{Db, StoreError, on_db};

/// What a handshake showed of the endpoint's own (leaf) certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeenCertificate {
    /// Its issuer (RFC 4514).
    pub issuer: String,
    /// When it expires (Unix ms).
    pub not_after: i64,
}

/// The `server_certificate` column as answers show it; `None` for none or one that does not
/// read.
pub(crate) fn server_certificate(stored: Option<&str>) -> Option<ServerCertificate> {
    serde_json::from_str(stored?).ok()
}

impl Db {
    /// Records the endpoint's own certificate as an attempt's handshake showed it at `now`, and
    /// queues the expiry notices it and the endpoint's client certificate call for. Answers how
    /// many notices were queued.
    pub(crate) async fn record_server_certificate(
        &self,
        endpoint: &EndpointKey,
        seen: &SeenCertificate,
        now: i64,
    ) -> Result<usize, StoreError> {
        on_db!(self, |pool, DB| {
            let mut tx = pool.begin_with(DB::BEGIN).await?;
            // NO KEY UPDATE: compatible with the KEY SHARE a batch of attempts holds on its
            // endpoints.
            let read = format!(
                "SELECT credentials_view, certificate_notices FROM kxp_endpoints \
                 WHERE account_id = $1 AND id = $2 AND status <> 'deleted'{}",
                DB::row_lock(" FOR NO KEY UPDATE")
            );
            let Some((view, notices)) =
                sqlx::query_as::<_, (Option<String>, Option<String>)>(&read)
                    .bind(&endpoint.account_id)
                    .bind(&endpoint.id)
                    .fetch_optional(&mut *tx)
                    .await?
            else {
                return Ok(0);
            };
            let round = round(view.as_deref(), notices.as_deref(), seen, now);
            sqlx::query(
                "UPDATE kxp_endpoints SET server_certificate = $1, certificate_notices = $2 \
                 WHERE account_id = $3 AND id = $4",
            )
            .bind(&round.server_certificate)
            .bind(&round.remembered)
            .bind(&endpoint.account_id)
            .bind(&endpoint.id)
            .execute(&mut *tx)
            .await?;
            let mut queued = 0;
            for (kind, notice) in &round.announce {
                queued += queue_notices::<DB>(
                    &mut tx,
                    kind,
                    endpoint,
                    NoticeDetail::Certificate(notice),
                    now,
                )
                .await?;
            }
            tx.commit().await?;
            Ok(queued)
        })
    }
}

/// What recording a certificate writes: the `server_certificate` and `certificate_notices`
/// columns, and the notices to queue.
struct Round {
    server_certificate: String,
    remembered: String,
    announce: Vec<(&'static str, CertificateNotice)>,
}

/// One certificate watched, with the notice its expiry calls for.
struct Due {
    role: CertificateRole,
    kind: &'static str,
    subject: Option<String>,
    issuer: String,
    not_after: i64,
}

/// The round of the endpoint whose row holds `view` (`credentials_view`) and `notices`
/// (`certificate_notices`), as `seen` at `now`.
fn round(view: Option<&str>, notices: Option<&str>, seen: &SeenCertificate, now: i64) -> Round {
    let sent: Vec<String> = notices
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default();
    let client = CredentialsView::of_row(view)
        .tls
        .and_then(|tls| tls.client_certificate);
    let server = Due {
        role: CertificateRole::Server,
        kind: SERVER_EXPIRING,
        subject: None,
        issuer: seen.issuer.clone(),
        not_after: seen.not_after,
    };
    let client = client.map(|cert| Due {
        role: CertificateRole::Client,
        kind: CLIENT_EXPIRING,
        not_after: cert.not_after.unix_ms().unwrap_or(i64::MAX),
        subject: Some(cert.subject),
        issuer: cert.issuer,
    });
    let watched: Vec<Due> = [Some(server), client].into_iter().flatten().collect();
    let current: Vec<_> = watched
        .iter()
        .map(|d| (d.role.clone(), d.not_after))
        .collect();
    let mut new_keys = Vec::new();
    let mut announce = Vec::new();
    for cert in watched {
        if let Some((_, keys)) = certificates::due(&cert.role, cert.not_after, now, &sent) {
            new_keys.extend(keys);
            announce.push(cert);
        }
    }
    let remembered = certificates::remembered(&sent, &current, new_keys);
    let shown = ServerCertificate {
        issuer: seen.issuer.clone(),
        not_after: Timestamp::from_unix_ms(seen.not_after),
        seen_at: Timestamp::from_unix_ms(now),
    };
    let announce = announce
        .into_iter()
        .map(|cert| {
            let notice = CertificateNotice {
                days_left: certificates::days_left(cert.not_after, now),
                not_after: rfc3339(cert.not_after),
                certificate: cert.role,
                subject: cert.subject,
                issuer: cert.issuer,
            };
            (cert.kind, notice)
        })
        .collect();
    Round {
        server_certificate: serde_json::to_string(&shown).unwrap_or_default(),
        remembered: serde_json::to_string(&remembered).unwrap_or_default(),
        announce,
    }
}
