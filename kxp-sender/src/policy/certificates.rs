//! When an endpoint's certificates call for a notice: the client certificate the sender presents
//! 30 days before it expires, the endpoint's own certificate 14 and 3 days before, each notice
//! once per certificate (a renewed certificate, with a new expiry, starts again). Pure: the
//! store keeps what was sent and queues what this says.

use kxp_api::{CertificateRole, ExpiringCertificate, Timestamp};

use crate::model::DAY_MS;

/// Days before expiry at which the client certificate is announced.
pub(crate) const CLIENT_NOTICES: &[i64] = &[30];

/// Days before expiry at which the endpoint's own certificate is announced.
pub(crate) const SERVER_NOTICES: &[i64] = &[14, 3];

/// The notice kinds.
pub(crate) const CLIENT_EXPIRING: &str = "endpoint.certificate_expiring";
/// …of the endpoint's own certificate.
pub(crate) const SERVER_EXPIRING: &str = "endpoint.server_certificate_expiring";

/// Whole days from `now` to `not_after` (Unix ms), rounded down: 0 on the last day.
pub(crate) fn days_left(not_after: i64, now: i64) -> i64 {
    (not_after - now).div_euclid(DAY_MS)
}

/// The thresholds of `role`.
fn thresholds(role: &CertificateRole) -> &'static [i64] {
    match role {
        CertificateRole::Client => CLIENT_NOTICES,
        _ => SERVER_NOTICES,
    }
}

/// What a notice already sent is remembered by.
fn key(role: &CertificateRole, not_after: i64, days: i64) -> String {
    format!("{role}:{not_after}:{days}")
}

/// The notice a certificate of `role` expiring at `not_after` calls for at `now`, given the
/// notices already `sent`: `Some(days)` with the threshold it announces (the most urgent one
/// crossed, so a certificate first seen 2 days before expiry gets one notice, not two), and the
/// keys to remember from then on. `None` when nothing new is due.
pub(crate) fn due(
    role: &CertificateRole,
    not_after: i64,
    now: i64,
    sent: &[String],
) -> Option<(i64, Vec<String>)> {
    let left = days_left(not_after, now);
    let crossed: Vec<i64> = thresholds(role)
        .iter()
        .copied()
        .filter(|days| left < *days)
        .collect();
    let newest = crossed
        .iter()
        .copied()
        .filter(|days| !sent.contains(&key(role, not_after, *days)))
        .min()?;
    let keys = crossed
        .into_iter()
        .map(|days| key(role, not_after, days))
        .collect();
    Some((newest, keys))
}

/// The notices to remember after a round: `sent` without those of other certificates of the
/// roles in `current` (a renewed certificate's old keys are of no more use), plus `new`.
pub(crate) fn remembered(
    sent: &[String],
    current: &[(CertificateRole, i64)],
    new: Vec<String>,
) -> Vec<String> {
    let mut kept: Vec<String> = sent
        .iter()
        .filter(|k| {
            current
                .iter()
                .any(|(role, not_after)| k.starts_with(&format!("{role}:{not_after}:")))
        })
        .cloned()
        .collect();
    for k in new {
        if !kept.contains(&k) {
            kept.push(k);
        }
    }
    kept
}

/// The certificates that show as expiring in the endpoint's health: the client certificate
/// within its first threshold, the server certificate within its first, most urgent first.
pub(crate) fn expiring(
    client: Option<i64>,
    server: Option<i64>,
    now: i64,
) -> Vec<ExpiringCertificate> {
    let mut expiring: Vec<ExpiringCertificate> = [
        (CertificateRole::Client, client),
        (CertificateRole::Server, server),
    ]
    .into_iter()
    .filter_map(|(role, not_after)| {
        let not_after = not_after?;
        let left = days_left(not_after, now);
        let first = thresholds(&role).iter().copied().max().unwrap_or(0);
        (left < first).then(|| ExpiringCertificate {
            certificate: role,
            not_after: Timestamp::from_unix_ms(not_after),
            days_left: left,
        })
    })
    .collect();
    expiring.sort_by_key(|e| e.days_left);
    expiring
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn each_threshold_is_announced_once_and_the_most_urgent_when_several_are_crossed() {
        let server = CertificateRole::Server;
        let at = NOW + 20 * DAY_MS;
        assert_eq!(due(&server, at, NOW, &[]), None);
        let (days, keys) = due(&server, at, at - 10 * DAY_MS, &[]).unwrap();
        assert_eq!((days, keys.len()), (14, 1));
        assert_eq!(due(&server, at, at - 9 * DAY_MS, &keys), None);
        let (days, later) = due(&server, at, at - 2 * DAY_MS, &keys).unwrap();
        assert_eq!((days, later.len()), (3, 2));
        assert_eq!(due(&server, at, at - DAY_MS, &later), None);
        // First seen two days before expiry: one notice, for 3 days.
        let (days, keys) = due(&server, at, at - 2 * DAY_MS, &[]).unwrap();
        assert_eq!((days, keys.len()), (3, 2));
        // A renewed certificate starts again.
        let renewed = at + 90 * DAY_MS;
        assert!(due(&server, renewed, renewed - 10 * DAY_MS, &keys).is_some());
        let kept = remembered(&keys, &[(server.clone(), renewed)], vec![]);
        assert!(kept.is_empty());
    }

    #[test]
    fn the_client_certificate_is_announced_thirty_days_ahead_and_health_shows_both() {
        let client = CertificateRole::Client;
        let at = NOW + 25 * DAY_MS;
        assert_eq!(due(&client, at, NOW, &[]).unwrap().0, 30);
        let shown = expiring(Some(at), Some(NOW + 10 * DAY_MS), NOW);
        assert_eq!(shown.len(), 2);
        assert_eq!(shown[0].certificate, CertificateRole::Server);
        assert_eq!(shown[0].days_left, 10);
        assert!(expiring(Some(NOW + 40 * DAY_MS), Some(NOW + 20 * DAY_MS), NOW).is_empty());
        assert_eq!(days_left(NOW - 1, NOW), -1);
    }
}
