//! The dead-letter queue: the dead deliveries not replayed yet, overall or of one endpoint,
//! each with a replay button; replaying all of them behind a confirmation that states the
//! exact count; and the replays just made, refreshing until they are through.

use maud::{Markup, html};

use super::events::{REFRESH_SECS, in_flight, status};
use super::{Frame, Refresh, account_page_with};
use crate::model::{Delivery, Endpoint, rfc3339};

/// What the dead-letter page shows.
pub(in crate::console) struct DeadLetters<'a> {
    /// The endpoint it is narrowed to, if any.
    pub endpoint: Option<&'a Endpoint>,
    /// A page of dead deliveries, oldest first, with their endpoints' URLs (`None`: the
    /// endpoint was deleted, and nothing can be replayed to it).
    pub dead: &'a [(Delivery, Option<String>)],
    /// The cursor of the next page, when there is one.
    pub next: Option<&'a str>,
    /// How many a "replay all" would queue now.
    pub count: i64,
    /// The replays just made (after a bulk replay), newest first.
    pub replays: &'a [Delivery],
    /// How many a bulk replay just queued.
    pub queued: Option<u64>,
    /// Where a "replay all" confirmation starts from (this page's query, minus the paging).
    pub replay_all: String,
    /// This page's own URL (what it reloads).
    pub here: String,
}

/// The page.
pub(in crate::console) fn dead_letters(frame: &Frame<'_>, page: &DeadLetters<'_>) -> Markup {
    let refresh = in_flight(page.replays.iter()).then_some(Refresh {
        seconds: REFRESH_SECS,
        url: &page.here,
    });
    let event_link = |d: &Delivery| frame.url(&format!("/events/{}#{}", d.event_id, d.id));
    let main = html! {
        @if let Some(endpoint) = page.endpoint {
            p { "Of " code { (endpoint.url) } " only. " a href=(frame.url("/dead-letters")) { "All endpoints" } }
        }
        @if let Some(queued) = page.queued {
            p.notice role="status" { (queued) " dead "
                (if queued == 1 { "delivery was" } else { "deliveries were" }) " queued again." }
        }
        @if !page.replays.is_empty() {
            section aria-labelledby="replays" {
                h2 #replays { "Replayed just now" }
                @if refresh.is_some() { p { small { "This page refreshes itself until they are through." } } }
                table {
                    thead { tr { th scope="col" { "Delivery" } th scope="col" { "Status" } th scope="col" { "Attempts" } } }
                    tbody {
                        @for d in page.replays {
                            tr {
                                td { a href=(event_link(d)) { code { (d.id) } } }
                                td { (status(d)) }
                                td { (d.attempts) }
                            }
                        }
                    }
                }
            }
        }
        @if page.dead.is_empty() {
            p { "No dead deliveries." }
        } @else {
            @if frame.may_change && page.count > 0 {
                p { a.button href=(page.replay_all) { "Replay all " (page.count) "…" } }
            }
            table {
                caption { "Dead deliveries, oldest first" }
                thead { tr {
                    th scope="col" { "Event" } th scope="col" { "Endpoint" } th scope="col" { "Attempts" }
                    th scope="col" { "Last answer" } th scope="col" { "Dead since" }
                    th scope="col" { span.hidden { "Action" } }
                } }
                tbody {
                    @for (d, url) in page.dead {
                        tr {
                            td { a href=(event_link(d)) { code { (d.event_id) } } }
                            td { @match url { Some(url) => { (url) } None => { "a deleted endpoint" } } }
                            td { (d.attempts) }
                            td {
                                @if let Some(code) = d.last_status { (code) " " }
                                @if let Some(error) = &d.last_error { code { (error) } }
                            }
                            td { (rfc3339(d.updated_at)) }
                            td {
                                @if frame.may_change && url.is_some() {
                                    form.inline method="post" action=(frame.url(&format!("/deliveries/{}/replay", d.id))) {
                                        (frame.csrf())
                                        button type="submit" aria-label={ "Replay delivery " (d.id) } { "Replay" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = page.next {
                p { a href=(next) { "Older dead deliveries after these →" } }
            }
        }
    };
    account_page_with(frame, "Dead letters", main, refresh)
}

/// The question before a bulk replay: exactly how many, and the form that replays exactly
/// those (the dead ones it counted, by the time it counted them).
pub(in crate::console) fn replay_confirm(
    frame: &Frame<'_>,
    endpoint: Option<&Endpoint>,
    count: i64,
    counted_at: i64,
) -> Markup {
    let main = html! {
        p { "Replay " strong { (count) } " dead "
            (if count == 1 { "delivery" } else { "deliveries" })
            @if let Some(endpoint) = endpoint { " of " code { (endpoint.url) } }
            "? Each is queued again as a new delivery, once." }
        p { small { "Deliveries that die after " (rfc3339(counted_at)) " are not part of this replay." } }
        form.inline method="post" action=(frame.url("/dead-letters/replay")) {
            (frame.csrf())
            input type="hidden" name="dead_by" value=(counted_at);
            @if let Some(endpoint) = endpoint { input type="hidden" name="endpoint" value=(endpoint.id); }
            button type="submit" { "Replay " (count) }
        }
        a href=(frame.url("/dead-letters")) { "Cancel" }
    };
    account_page_with(frame, "Replay dead deliveries", main, None)
}
