//! What an operational notice says: its envelope (the shape of an event's, signed like a
//! delivery), the channels it goes to, and its e-mail text. Pure: the store queues what this
//! builds, and the notifier sends it.

use serde::Serialize;
use serde_json::Value;

use crate::model::{
    CertificateNotice, CircuitState, DeadLettersNotice, EndpointStatus, EventId, NoticeDetail,
    NoticeFacts, Notification, rfc3339,
};

/// The kind of the notice that a pull endpoint's reader stopped.
pub(crate) const READER_STALLED: &str = "endpoint.reader_stalled";

/// The kind of the notice that dead deliveries reach the dead-letter retention within a day.
pub(crate) const DEAD_LETTERS_EXPIRING: &str = "endpoint.dead_letters_expiring";

/// The `data` of a notice's envelope.
#[derive(Debug, Serialize)]
struct NoticeData<'a> {
    endpoint_id: &'a str,
    /// `null` for a pull endpoint, which has none.
    url: Option<&'a str>,
    description: &'a str,
    status: EndpointStatus,
    circuit_state: CircuitState,
    consecutive_failures: i64,
    failing_since: Option<String>,
    last_error: Option<&'a str>,
    next_probe_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    certificate: Option<&'a CertificateNotice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_letters: Option<&'a DeadLettersNotice>,
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

/// The notice's event id and envelope bytes, with `detail` in its `data`.
pub(crate) fn envelope(
    facts: &NoticeFacts,
    kind: &str,
    detail: NoticeDetail<'_>,
    now: i64,
) -> (EventId, String) {
    let (certificate, dead_letters) = match detail {
        NoticeDetail::None => (None, None),
        NoticeDetail::Certificate(c) => (Some(c), None),
        NoticeDetail::DeadLetters(d) => (None, Some(d)),
    };
    let id = uuid::Uuid::new_v4().to_string();
    let envelope = NoticeEnvelope {
        id: &id,
        kind,
        api_version: &facts.default_api_version,
        created_at: rfc3339(now),
        data: NoticeData {
            endpoint_id: facts.endpoint_id.as_str(),
            url: (!facts.url.is_empty()).then_some(facts.url.as_str()),
            description: &facts.description,
            status: facts.status,
            circuit_state: facts.circuit_state,
            consecutive_failures: facts.consecutive_failures.unwrap_or(0),
            failing_since: facts.failing_since.map(rfc3339),
            last_error: facts.last_error.as_deref(),
            next_probe_at: facts.circuit_probe_at.map(rfc3339),
            certificate,
            dead_letters,
        },
    };
    let payload = serde_json::to_string(&envelope).unwrap_or_default();
    (EventId::from(id), payload)
}

/// The channels the account has configured: `(channel, target)`.
pub(crate) fn channels(facts: &NoticeFacts) -> Vec<(&'static str, &str)> {
    let mut channels = Vec::new();
    if let Some(url) = facts.ops_url.as_deref() {
        channels.push(("webhook", url));
    }
    if let Some(address) = facts.contact_email.as_deref() {
        channels.push(("email", address));
    }
    channels
}

/// The subject and plain-text body of a notice's e-mail, from its envelope.
pub(crate) fn email_text(n: &Notification) -> (String, String) {
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
    let certificate = &data["certificate"];
    let cert = |name: &str| certificate[name].as_str().unwrap_or("-").to_owned();
    let days = certificate["days_left"].as_i64().unwrap_or(0);
    match n.kind.as_str() {
        "endpoint.certificate_expiring" => (
            format!("[kxp] Client certificate expires in {days} days: {url}"),
            format!(
                "The client certificate kxp presents to your webhook endpoint expires on {at} \
                 ({days} days left).\n\nEndpoint:    {endpoint} ({url})\n\
                 Certificate: {subject}, issued by {issuer}\n\n\
                 Issue a new one and set it on the endpoint (PATCH /v1/endpoints/{endpoint} with \
                 `tls`, or the console's Credentials page) before then: once it expires, your \
                 gateway refuses the deliveries, which wait and retry.\n",
                at = cert("not_after"),
                endpoint = n.endpoint_id,
                subject = cert("subject"),
                issuer = cert("issuer"),
            ),
        ),
        "endpoint.server_certificate_expiring" => (
            format!("[kxp] Your endpoint's TLS certificate expires in {days} days: {url}"),
            format!(
                "The TLS certificate your webhook endpoint presents expires on {at} ({days} days \
                 left).\n\nEndpoint:    {endpoint} ({url})\nIssuer:      {issuer}\n\n\
                 Renew it before then: once it expires, every delivery fails its TLS handshake \
                 and waits (nothing is lost) until the endpoint presents a valid certificate.\n",
                at = cert("not_after"),
                endpoint = n.endpoint_id,
                issuer = cert("issuer"),
            ),
        ),
        DEAD_LETTERS_EXPIRING => {
            let dead = &data["dead_letters"];
            (
                format!(
                    "[kxp] Dead deliveries of your endpoint will be deleted: {}",
                    n.endpoint_id
                ),
                format!(
                    "{count} dead deliveries of your webhook endpoint {id} ({url}) reach the \
                     dead-letter retention and will be deleted from {at}.\n\n\
                     Replay the ones you still want before then (POST \
                     /v1/endpoints/{id}/replay with status=dead, or the console's dead-letter \
                     queue). Deleted, they leave the endpoint's catch-up feed too: a reader \
                     that has not read them by then finds them purged.\n",
                    count = dead["count"].as_u64().unwrap_or(0),
                    id = n.endpoint_id,
                    at = dead["delete_after"].as_str().unwrap_or("-"),
                ),
            )
        }
        READER_STALLED => (
            format!(
                "[kxp] Your pull endpoint's reader has stopped: {}",
                n.endpoint_id
            ),
            format!(
                "The reader of your pull endpoint {id} has not committed its cursor for a while, \
                 and events wait unread.\n\n\
                 Nothing is lost: unread events stay in the endpoint's feed, however old, until \
                 the reader commits past them. Check the process that reads it (kxp-catchup's \
                 PullConsumer, or your own), then watch its lag (GET \
                 /v1/endpoints/{id}/health, `pull`).\n",
                id = n.endpoint_id
            ),
        ),
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
            status: EndpointStatus::Active,
            circuit_state: CircuitState::Open,
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
        let (id, payload) = envelope(
            &facts(),
            "endpoint.circuit_opened",
            NoticeDetail::None,
            1_800_000_001_000,
        );
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
        assert_eq!(channels(&facts()).len(), 2);
        let none = NoticeFacts {
            ops_url: None,
            contact_email: None,
            ..facts()
        };
        assert!(channels(&none).is_empty());
    }

    #[test]
    fn the_email_says_what_happened_and_what_to_do() {
        let (_, payload) = envelope(
            &facts(),
            "endpoint.disabled",
            NoticeDetail::None,
            1_800_000_001_000,
        );
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
