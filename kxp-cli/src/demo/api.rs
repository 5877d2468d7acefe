//! The demo's calls to the sender's public HTTP API, through [`kxp_api::Client`] as a payment
//! platform's code would make them: the client itself, registering the endpoints, pointing the
//! operational webhooks at the receiver, emitting the events (idempotently), listing the
//! deliveries and the dead letters, and asking for a portal link to the console. Each error names the request that failed. What the demo makes of the answers
//! (narration, replays, the verdict) stays in `demo.rs` and [`super::report`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kxp_api::{
    AccountPatch, Client, ClientError, DeliveryQuery, EndpointCreated, EventId, NewEndpoint,
    NewEvent, NewPortalLink, Patch, PortalLink, PortalScope,
};
use serde_json::{Value, json};

use super::lock;
use super::receiver::ENDPOINT_TIMEOUT;

/// Emits `n` events at `pace`: payments, and a refund every tenth. Each has an idempotency key,
/// so a retried POST never makes a second event.
pub(super) async fn emit_all(
    api: Client,
    n: u64,
    pace: Duration,
    emitted: Arc<Mutex<Vec<EventId>>>,
) -> Result<(), String> {
    let mut ticker = tokio::time::interval(pace.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for seq in 0..n {
        ticker.tick().await;
        let (kind, data) = if seq % 10 == 9 {
            let amount = amount(seq);
            (
                "refund.created",
                json!({"refund_id": format!("re_demo_{seq:05}"), "seq": seq, "amount": amount, "currency": "EUR"}),
            )
        } else {
            payment(seq)
        };
        let id = emit(&api, &format!("demo-{seq}"), kind, &data).await?;
        lock(&emitted).push(id);
    }
    Ok(())
}

/// Emits the payment with sequence number `seq` (idempotently, like [`emit_all`]).
pub(super) async fn emit_payment(api: &Client, seq: u64) -> Result<EventId, String> {
    let (kind, data) = payment(seq);
    emit(api, &format!("demo-{seq}"), kind, &data).await
}

fn amount(seq: u64) -> u64 {
    500 + (seq * 7919) % 20_000
}

/// The type and data of the payment with sequence number `seq`.
fn payment(seq: u64) -> (&'static str, Value) {
    (
        "payment.succeeded",
        json!({"payment_id": format!("pay_demo_{seq:05}"), "seq": seq, "amount": amount(seq), "currency": "EUR"}),
    )
}

/// The demo's client of the sender's API (`kxp_api::Client`, as a payment platform's code would
/// use it), over loopback.
pub(super) fn client(addr: SocketAddr, api_key: String) -> Result<Client, String> {
    let http = reqwest::Client::builder()
        // Loopback only: a proxy from the environment must not see the demo's traffic.
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    Ok(Client::new(&format!("http://{addr}"), api_key)
        .map_err(|e| e.to_string())?
        .with_http(http))
}

/// Registers an endpoint for the event types matching `pattern`. The answer holds its signing
/// secret, handed to the receiver and never printed.
pub(super) async fn create_endpoint(
    api: &Client,
    url: &str,
    pattern: &str,
    description: &str,
) -> Result<EndpointCreated, String> {
    let mut endpoint = NewEndpoint::new(url);
    endpoint.event_types = Some(vec![pattern.to_owned()]);
    endpoint.description = Some(description.to_owned());
    endpoint.timeout_ms = Some(u64::try_from(ENDPOINT_TIMEOUT.as_millis()).unwrap_or(5000));
    // The demo's receiver is not listening yet (it needs the secret first), and its routes
    // take POSTs only.
    endpoint.skip_challenge = true;
    api.create_endpoint(&endpoint)
        .await
        .map_err(|e| format!("POST /v1/endpoints: {e}"))
}

/// Points the account's operational webhooks at `url`; returns the ops secret they are signed
/// with (shown only in this answer).
pub(super) async fn set_ops_url(api: &Client, url: &str) -> Result<kxp_api::Secret, String> {
    let mut patch = AccountPatch::default();
    patch.ops_url = Patch::Set(url.to_owned());
    api.update_account(&patch)
        .await
        .map_err(|e| format!("PATCH /v1/account: {e}"))?
        .ops_secret
        .ok_or_else(|| "PATCH /v1/account: the answer has no `ops_secret`".to_owned())
}

/// Emits one event with an `Idempotency-Key`; a try that fails in transit or with a 5xx is
/// repeated with the same key, so the event exists once whatever happened to the answer.
pub(super) async fn emit(
    api: &Client,
    idempotency_key: &str,
    event_type: &str,
    data: &Value,
) -> Result<EventId, String> {
    let event = NewEvent::new(event_type, data).map_err(|e| e.to_string())?;
    let mut last_error = String::new();
    for _ in 0..3 {
        match api.create_event(&event, Some(idempotency_key)).await {
            Ok(event) => return Ok(event.id),
            Err(e) => {
                last_error = format!("POST /v1/events: {e}");
                let retry = match &e {
                    ClientError::Transport(_) => true,
                    e => e.status().is_some_and(|status| status >= 500),
                };
                if !retry {
                    return Err(last_error);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last_error)
}

/// The account's dead deliveries not replayed yet: what the console's dead-letter page lists.
pub(super) async fn dead_letters(api: &Client) -> Result<Vec<kxp_api::Delivery>, String> {
    let dead = api
        .all_deliveries(&DeliveryQuery::dead().limit(500))
        .await
        .map_err(|e| format!("GET /v1/deliveries?status=dead: {e}"))?;
    Ok(dead
        .into_iter()
        .filter(|d| d.replayed_by.is_none())
        .collect())
}

/// A one-time sign-in link to the console, for the account, that opens a `manage` session
/// (one that may replay) and works for `ttl`.
pub(super) async fn portal_link(api: &Client, ttl: Duration) -> Result<PortalLink, String> {
    let seconds = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
    api.create_portal_link(&NewPortalLink::new(PortalScope::Manage).ttl_seconds(seconds))
        .await
        .map_err(|e| format!("POST /v1/portal-links: {e}"))
}

/// Every delivery of the account, all pages, oldest first.
pub(super) async fn all_deliveries(api: &Client) -> Result<Vec<kxp_api::Delivery>, String> {
    api.all_deliveries(&DeliveryQuery::default().limit(500))
        .await
        .map_err(|e| format!("GET /v1/deliveries: {e}"))
}
