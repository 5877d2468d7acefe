//! The console's pages, as maud templates: checked at compile time, and every interpolated
//! value is HTML-escaped. No inline script (the CSP forbids it; the one script file only adds copy
//! buttons, which stay hidden without it); every form posts normally and
//! carries its `csrf_token`. One module per area ([`endpoints`], [`events`],
//! [`dead_letters`]); [`chart`] draws the health
//! charts as inline SVG.

use maud::{DOCTYPE, Markup, html};

mod chart;
mod credentials;
mod dead_letters;
mod endpoints;
mod erasures;
mod events;
mod filters;
mod operators;

pub(super) use credentials::credentials;
pub(super) use dead_letters::{DeadLetters, dead_letters, replay_confirm};
pub(super) use endpoints::{
    DeleteConfirm, EndpointForm, EndpointRow, FormFor, NewSecret, delete_confirm, endpoint,
    endpoint_form, endpoints, listen, register,
};
pub(super) use erasures::erasures;
pub(super) use events::{DeliveryView, Found, SearchForm, event, in_flight, search};
pub(super) use filters::{FilterShown, filter};
pub(super) use operators::{accounts, audit, notifications};

/// What every page about one account shows around its content: the account, the way back to
/// the accounts list (operators), the sections, and signing out.
pub(super) struct Frame<'a> {
    /// `acc_…`
    pub account_id: &'a str,
    /// The account's name.
    pub account_name: &'a str,
    /// The session's CSRF token, for every form.
    pub csrf_token: &'a str,
    /// An operator is looking.
    pub operator: bool,
    /// The session may change things (else the pages leave out the forms that would).
    pub may_change: bool,
}

impl Frame<'_> {
    /// `/console/a/<account>` followed by `rest`.
    pub(crate) fn url(&self, rest: &str) -> String {
        format!("/console/a/{}{rest}", self.account_id)
    }

    /// The hidden CSRF input every form carries.
    pub(crate) fn csrf(&self) -> Markup {
        html! { input type="hidden" name="csrf_token" value=(self.csrf_token); }
    }
}

/// A page about one account: its sections in a navigation bar above `main`.
pub(super) fn account_page(frame: &Frame<'_>, title: &str, main: Markup) -> Markup {
    account_page_with(frame, title, main, None)
}

/// [`account_page`] with the console's script (copy buttons): only the pages that have a
/// button for it load it.
pub(super) fn account_page_with_script(
    frame: &Frame<'_>,
    title: &str,
    main: Markup,
    script: Option<&str>,
) -> Markup {
    let main = html! {
        (main)
        @if let Some(src) = script { script src=(src) defer {} }
    };
    account_page_with(frame, title, main, None)
}

/// [`account_page`], reloading itself when `refresh` says so (a page that shows deliveries on
/// their way: no script needed to watch them go through).
pub(super) fn account_page_with(
    frame: &Frame<'_>,
    title: &str,
    main: Markup,
    refresh: Option<Refresh<'_>>,
) -> Markup {
    let nav = html! {
        nav aria-label="Sections" {
            @if frame.operator { a href="/console" { "All accounts" } " · " }
            strong { (frame.account_name) } " " small { code { (frame.account_id) } } " · "
            a href=(frame.url("")) { "Endpoints" } " · "
            a href=(frame.url("/events")) { "Events" } " · "
            a href=(frame.url("/dead-letters")) { "Dead letters" } " · "
            a href=(frame.url("/erasures")) { "Erasures" }
            @if !frame.operator {
                " · " span.badge { @if frame.may_change { "manage" } @else { "read only" } }
            }
        }
        div.session {
            form.inline method="post" action="/console/sign-out" {
                (frame.csrf())
                button type="submit" { "Sign out" }
            }
            form.inline method="post" action="/console/sign-out-everywhere" {
                (frame.csrf())
                button type="submit" { "Sign out everywhere" }
            }
        }
    };
    frame_page(title, nav, main, refresh)
}

/// The frame of every page.
fn layout(title: &str, main: Markup) -> Markup {
    frame_page(title, html! {}, main, None)
}

/// A page that reloads itself: after `seconds`, from `url`. The URL is given, never left to
/// the browser: a page reached at a `#fragment` would only scroll to it, not reload.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refresh<'a> {
    /// Seconds before the reload.
    pub seconds: u32,
    /// What to load (same origin, no fragment).
    pub url: &'a str,
}

/// The frame of every page, with what the header shows beside the brand.
pub(super) fn frame_page(
    title: &str,
    header: Markup,
    main: Markup,
    refresh: Option<Refresh<'_>>,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(refresh) = refresh {
                    meta http-equiv="refresh" content={ (refresh.seconds) "; url=" (refresh.url) };
                }
                title { (title) " · kxp console" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                header { p.brand { a href="/console" { "kxp console" } } (header) }
                main { h1 { (title) } (main) }
            }
        }
    }
}

/// The page a portal link opens: nothing happens until its button is pressed (mail scanners
/// and link previews fetch links, and must not use them up).
pub(super) fn link_page(token: &str, csrf_token: &str) -> Markup {
    layout(
        "Sign in",
        html! {
            p { "This link signs you in to the webhooks console. It works once." }
            form method="post" action="/console/sign-in" {
                input type="hidden" name="csrf_token" value=(csrf_token);
                input type="hidden" name="token" value=(token);
                button type="submit" { "Continue to the console" }
            }
        },
    )
}

/// The operators' sign-in form; `refused` says the last key did not sign in (and not why).
pub(super) fn key_form(csrf_token: &str, refused: bool) -> Markup {
    layout(
        "Sign in",
        html! {
            @if refused {
                p.error role="alert" { "That key does not sign in. Check it and try again." }
            }
            p { "Operators sign in with their operator key (" code { "kxp operators create" } "). Merchants use the link their platform gives them." }
            form method="post" action="/console/sign-in" {
                input type="hidden" name="csrf_token" value=(csrf_token);
                label for="key" { "Operator key" }
                input #key type="password" name="key" autocomplete="off" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// A page that only says something: an error, or why a request was refused.
pub(super) fn message(title: &str, text: &str) -> Markup {
    layout(
        title,
        html! {
            p { (text) }
            p { a href="/console" { "Go to the console" } }
        },
    )
}
