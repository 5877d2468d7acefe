//! An endpoint's filter page: the filter as JSON, a dry run of what is typed over the
//! account's newest events, and saving it. The rules are kxp-filter's, stated once here in
//! short and in full in the docs.

use kxp_api::FilterTested;
use maud::{Markup, html};

use super::{Frame, account_page};
use crate::model::Endpoint;

/// What the filter page shows besides the endpoint: the textarea and the number of events as
/// typed, and why the last form was refused or what its dry run found.
pub(in crate::console) struct FilterShown<'a> {
    /// The filter as typed (or as stored, pretty-printed).
    pub text: &'a str,
    /// The number of events to try it on, as typed (empty: the default).
    pub limit: &'a str,
    /// Why the last form was refused.
    pub refused: Option<&'a str>,
    /// What the last dry run found.
    pub tried: Option<&'a FilterTested>,
}

/// The filter page of `endpoint`.
pub(in crate::console) fn filter(
    frame: &Frame<'_>,
    endpoint: &Endpoint,
    shown: &FilterShown<'_>,
) -> Markup {
    let action = |rest: &str| frame.url(&format!("/endpoints/{}/filter{rest}", endpoint.id));
    let main = html! {
        @if let Some(why) = shown.refused {
            p.error role="alert" { "Not done: " (why) }
        }
        p { "Of the events of its types (" (endpoint.types().join(", ")) "), "
            code { (endpoint.url) } " gets only those the filter takes. An event it does not "
            "take creates no delivery for this endpoint; replays ignore the filter." }
        details {
            summary { "How a filter reads" }
            ul {
                li { "A JSON object: each key is a dot path into the event — "
                    code { "type" } ", " code { "data.amount" } ", " code { "data.customer.country" } ", "
                    code { "tags" } " (a path starts with " code { "id" } ", " code { "type" } ", "
                    code { "api_version" } ", " code { "created_at" } ", " code { "data" } " or "
                    code { "tags" } ") — and each value a literal (equal to it) or operators: "
                    code { "$eq $ne $gt $gte $lt $lte $in $nin $exists $prefix" } "." }
                li { code { "$and" } " and " code { "$or" } " take a list of filters, "
                    code { "$not" } " one; the keys of one object all hold." }
                li { "Numbers compare as numbers, text byte by byte; a number never equals text." }
                li { "A missing field matches only " code { "$exists: false" } ", " code { "$ne" }
                    " and " code { "$nin" } "; a list matches when any of its items does." }
            }
            p { "Example: " code { r#"{"type": {"$prefix": "payment."}, "data.amount": {"$gte": 10000}}"# } }
        }
        form.stack method="post" action=(action("")) {
            (frame.csrf())
            label for="filter" { "Filter (JSON; empty: every event of its types)" }
            textarea #filter name="filter" rows="10" spellcheck="false" { (shown.text) }
            label for="limit" { "Try it on the newest events, at most 1000 (empty: 100)" }
            input #limit type="number" name="limit" min="1" max="1000" inputmode="numeric" value=(shown.limit);
            div.actions {
                button type="submit" formaction=(action("/try")) { "Try it" }
                @if frame.may_change {
                    button type="submit" { "Save the filter" }
                }
            }
        }
        @if let Some(tried) = shown.tried {
            h2 { "Dry run" }
            p role="status" { "Of the " (tried.tested) " newest events, the filter takes " (tried.matched) "." }
            @if !tried.matches.is_empty() {
                ul {
                    @for id in &tried.matches {
                        li { a href=(frame.url(&format!("/events/{id}"))) { code { (id) } } }
                    }
                }
            }
        }
    };
    account_page(frame, "Endpoint filter", main)
}
