//! Finding an event (by id, delivery id or tag, with filters), and an event with its
//! deliveries: the envelope as the exact bytes sent and as a pretty view, and
//! each delivery's attempts, next try and replay button. While a delivery is still on its way
//! the page refreshes itself (a `<meta http-equiv="refresh">`, no script), so a replay is seen
//! to go through.

use maud::{Markup, html};

use super::{Frame, Refresh, account_page_with};
use crate::model::{
    Attempt, Delivery, DeliveryStatus, Endpoint, Event, EventListed, Gone, HELD, now_ms, rfc3339,
};

/// Seconds between two refreshes of a page that shows deliveries on their way.
pub(in crate::console) const REFRESH_SECS: u32 = 2;

/// One delivery of the event, with its endpoint (if it still exists) and attempts.
pub(in crate::console) struct DeliveryView {
    /// The delivery.
    pub delivery: Delivery,
    /// Its endpoint, unless deleted.
    pub endpoint: Option<Endpoint>,
    /// Its attempts, in order.
    pub attempts: Vec<Attempt>,
}

/// How soon a pending delivery's next try must be for its page to keep refreshing.
const REFRESH_WITHIN_MS: i64 = 60_000;

/// Whether any of `deliveries` is on its way now (the page then refreshes itself): being
/// attempted, or pending with a try due within a minute. A held delivery (its endpoint paused,
/// disabled or with an open circuit) or one whose next try is hours away does not keep a page
/// reloading (nor its session alive) for nothing.
pub(in crate::console) fn in_flight<'a>(
    mut deliveries: impl Iterator<Item = &'a Delivery>,
) -> bool {
    let soon = now_ms().saturating_add(REFRESH_WITHIN_MS);
    deliveries.any(|d| match d.status {
        DeliveryStatus::Delivering => true,
        DeliveryStatus::Pending => d.next_attempt_at != HELD && d.next_attempt_at <= soon,
        _ => false,
    })
}

/// A delivery's status as a label.
pub(in crate::console) fn status(delivery: &Delivery) -> Markup {
    let name = delivery.status.as_str();
    html! {
        span class={ "state " (name) } { (name) }
        @if delivery.replayed_by.is_some() { " (replayed)" }
    }
}

/// The event page.
pub(in crate::console) fn event(
    frame: &Frame<'_>,
    event: &Event,
    deliveries: &[DeliveryView],
    refresh: bool,
) -> Markup {
    let pretty = serde_json::from_str::<serde_json::Value>(&event.payload)
        .and_then(|value| serde_json::to_string_pretty(&value))
        .unwrap_or_else(|_| event.payload.clone());
    let encrypted = deliveries.iter().any(|view| {
        view.endpoint
            .as_ref()
            .is_some_and(|e| e.encryption_jwk.is_some())
    });
    let main = html! {
        dl {
            dt { "Id" } dd { code { (event.id) } }
            dt { "Type" } dd { code { (event.event_type) } }
            dt { "API version" } dd { (event.api_version) }
            dt { "Created" } dd { (rfc3339(event.created_at)) }
        }
        h2 { "Deliveries" }
        @if deliveries.is_empty() {
            p { "No endpoint was subscribed to this event's type when it came in." }
        }
        @for view in deliveries {
            @let d = &view.delivery;
            section.delivery id=(d.id) aria-labelledby={ "h-" (d.id) } {
                h3 id={ "h-" (d.id) } {
                    @match &view.endpoint {
                        Some(endpoint) => { a href=(frame.url(&format!("/endpoints/{}", endpoint.id))) { (endpoint.url) } }
                        None => { "a deleted endpoint" }
                    }
                    " · " (status(d))
                }
                @if let Some(jwk) = view.endpoint.as_ref().and_then(|e| e.encryption_jwk.as_deref()) {
                    p.encrypted { "Encrypted: each attempt sends " code { "data_jwe" } " in place of " code { "data" }
                        ", made to the endpoint's key at that moment (" (key_name(jwk)) "). Only the merchant can read what was sent." }
                }
                p { small { "Delivery " code { (d.id) } ", " (d.attempts) " attempt" @if d.attempts != 1 { "s" } }
                    @if d.status == DeliveryStatus::Pending {
                        @if d.next_attempt_at == HELD { " · held (the endpoint is paused, disabled or its circuit is open)" }
                        @else { " · next try " (rfc3339(d.next_attempt_at)) }
                    }
                }
                @if !view.attempts.is_empty() {
                    table {
                        caption { "Attempts" }
                        thead { tr { th scope="col" { "#" } th scope="col" { "Started" } th scope="col" { "Took" }
                            th scope="col" { "Status" } th scope="col" { "Error" } th scope="col" { "Response" }
                            th scope="col" { "Signed with" } th scope="col" { "Verified with" } } }
                        tbody {
                            @for attempt in &view.attempts {
                                tr {
                                    td { (attempt.attempt) }
                                    td { (rfc3339(attempt.started_at)) }
                                    td { (attempt.duration_ms) " ms" }
                                    td { @match attempt.status_code { Some(code) => { (code) } None => { "–" } } }
                                    td { @if let Some(error) = &attempt.error { code { (error) } } }
                                    td { @if let Some(snippet) = &attempt.response_snippet { code { (snippet) } } }
                                    td { @if let Some(keys) = &attempt.signed_with {
                                        @for key in keys.split(',') { code title="key fingerprint" { (key) } " " } } }
                                    td { @if let Some(key) = &attempt.verified_key { code title="the receiver's X-Kxp-Verified-Key" { (key) } } }
                                }
                            }
                        }
                    }
                }
                @if frame.may_change && d.replayed_by.is_none() && event.gone().is_none()
                    && matches!(d.status, DeliveryStatus::Dead | DeliveryStatus::Delivered) && view.endpoint.is_some() {
                    form.inline method="post" action=(frame.url(&format!("/deliveries/{}/replay", d.id))) {
                        (frame.csrf())
                        button type="submit" aria-label={ "Replay delivery " (d.id) } { "Replay" }
                    }
                }
            }
        }
        h2 { "Envelope" }
        @if let Some(gone) = event.gone() {
            p.gone role="status" { @match gone {
                Gone::Erased => { "The payload was erased"
                    @if let Some(erasure) = &event.erasure_id { " by " a href=(frame.url("/erasures")) { code { (erasure) } } }
                    ": the server holds nothing of it any more." }
                Gone::Expired => { "The payload passed the retention it was sent with, and was erased: "
                    "the server holds nothing of it any more." }
            } }
        } @else if encrypted {
            p { "As the producer sent it, and as endpoints without an encryption key get it, byte for byte. "
                "The server keeps this plaintext until retention deletes the event (it must, to retry and replay); "
                "encrypted endpoints received " code { "data_jwe" } " instead:" }
        } @else {
            p { "As receivers get it, byte for byte:" }
        }
        @if event.gone().is_none() {
            pre.raw { code { (event.payload) } }
            details {
                summary { "Formatted" }
                pre { code { (pretty) } }
            }
        }
    };
    let here = frame.url(&format!("/events/{}", event.id));
    let refresh = refresh.then_some(Refresh {
        seconds: REFRESH_SECS,
        url: &here,
    });
    account_page_with(frame, "Event", main, refresh)
}

/// What the search form holds, as typed (shown again above the results).
#[derive(Default)]
pub(in crate::console) struct SearchForm {
    /// An event id, a delivery id, or a tag.
    pub q: String,
    /// An event type.
    pub event_type: String,
    /// A delivery status (`pending`, `delivered`, `dead`…): lists deliveries.
    pub status: String,
    /// An endpoint id: lists deliveries.
    pub endpoint: String,
    /// From (UTC, `YYYY-MM-DDTHH:MM` or RFC 3339).
    pub since: String,
    /// Until (the same).
    pub until: String,
}

/// What a search found.
pub(in crate::console) enum Found<'a> {
    /// Nothing asked yet.
    Nothing,
    /// Events, newest first.
    Events(&'a [EventListed]),
    /// Deliveries (a status or an endpoint was asked for), oldest first.
    Deliveries(&'a [Delivery]),
}

/// The search page: one box for an id or a tag, the filters, the results and the next page.
pub(in crate::console) fn search(
    frame: &Frame<'_>,
    form: &SearchForm,
    found: &Found<'_>,
    refused: Option<&str>,
    next: Option<&str>,
) -> Markup {
    let statuses = [
        "",
        "pending",
        "delivering",
        "delivered",
        "dead",
        "unread",
        "erased",
        "expired",
    ];
    let main = html! {
        form.stack role="search" method="get" action=(frame.url("/events")) {
            label for="q" { "Event id, delivery id, or tag (e.g. " code { "order:1234" } ")" }
            input #q type="search" name="q" value=(form.q) autofocus;
            details open[!form.event_type.is_empty() || !form.status.is_empty() || !form.endpoint.is_empty()
                || !form.since.is_empty() || !form.until.is_empty()] {
                summary { "Filters" }
                label for="type" { "Event type" }
                input #type type="text" name="type" value=(form.event_type);
                label for="status" { "Delivery status" }
                select #status name="status" {
                    @for status in statuses {
                        option value=(status) selected[form.status == status] {
                            @if status.is_empty() { "any" } @else { (status) }
                        }
                    }
                }
                label for="endpoint" { "Endpoint id" }
                input #endpoint type="text" name="endpoint" value=(form.endpoint) placeholder="ep_…";
                label for="since" { "From (UTC)" }
                input #since type="datetime-local" name="since" value=(form.since);
                label for="until" { "Until (UTC)" }
                input #until type="datetime-local" name="until" value=(form.until);
            }
            button type="submit" { "Search" }
        }
        @if let Some(why) = refused { p.error role="alert" { (why) } }
        @match found {
            Found::Nothing => {}
            Found::Events(events) => {
                @if events.is_empty() { p { "No events match." } } @else {
                    table {
                        caption { "Events, newest first" }
                        thead { tr { th scope="col" { "Event" } th scope="col" { "Type" }
                            th scope="col" { "Tags" } th scope="col" { "Created" } } }
                        tbody {
                            @for event in *events {
                                tr {
                                    td { a href=(frame.url(&format!("/events/{}", event.id))) { code { (event.id) } } }
                                    td { code { (event.event_type) } }
                                    td { @for tag in &event.tags { span.badge { (tag) } " " } }
                                    td { (rfc3339(event.created_at)) }
                                }
                            }
                        }
                    }
                }
            }
            Found::Deliveries(deliveries) => {
                @if deliveries.is_empty() { p { "No deliveries match." } } @else {
                    table {
                        caption { "Deliveries, oldest first" }
                        thead { tr { th scope="col" { "Delivery" } th scope="col" { "Event" }
                            th scope="col" { "Status" } th scope="col" { "Attempts" } th scope="col" { "Created" } } }
                        tbody {
                            @for d in *deliveries {
                                tr {
                                    td { a href=(frame.url(&format!("/events/{}#{}", d.event_id, d.id))) { code { (d.id) } } }
                                    td { code { (d.event_id) } }
                                    td { (status(d)) }
                                    td { (d.attempts) }
                                    td { (rfc3339(d.created_at)) }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(next) = next { p { a href=(next) { "More →" } } }
    };
    account_page_with(frame, "Find an event", main, None)
}

/// An encryption key in words: its curve and `kid`.
pub(in crate::console) fn key_name(jwk: &str) -> String {
    let jwk: serde_json::Value = serde_json::from_str(jwk).unwrap_or_default();
    let curve = jwk["crv"].as_str().unwrap_or("unknown curve");
    match jwk["kid"].as_str() {
        Some(kid) => format!("{curve}, kid {kid}"),
        None => curve.to_owned(),
    }
}
