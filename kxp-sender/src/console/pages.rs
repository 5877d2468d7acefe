//! The console's pages, as maud templates: checked at compile time, and every interpolated
//! value is HTML-escaped. No script anywhere (the CSP forbids it); every form posts normally
//! and carries its `csrf_token`.

use maud::{DOCTYPE, Markup, html};

use crate::model::PortalScope;

/// Who the home page says is signed in.
pub(super) enum Who<'a> {
    /// A merchant's portal session.
    Account {
        /// The account's name.
        name: &'a str,
        /// `acc_…`
        id: &'a str,
        /// What the session may do.
        scope: &'a PortalScope,
    },
    /// An operator's session.
    Operator {
        /// The operator's name.
        name: &'a str,
    },
}

/// The frame of every page.
fn layout(title: &str, main: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · kxp console" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                header { p.brand { "kxp console" } }
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

/// The console's home: who is signed in, and how to sign out.
pub(super) fn home(who: &Who<'_>, csrf_token: &str) -> Markup {
    layout(
        "Console",
        html! {
            @match who {
                Who::Account { name, id, scope } => {
                    p { "Signed in to the account " strong { (name) } " (" code { (id) } ")." }
                    p { "Scope: " strong { (scope.as_str()) }
                        @if matches!(scope, PortalScope::Read) { ": you can look, not change." } }
                }
                Who::Operator { name } => {
                    p { "Signed in as the operator " strong { (name) } "." }
                }
            }
            form method="post" action="/console/sign-out" {
                input type="hidden" name="csrf_token" value=(csrf_token);
                button type="submit" { "Sign out" }
            }
            form method="post" action="/console/sign-out-everywhere" {
                input type="hidden" name="csrf_token" value=(csrf_token);
                button type="submit" { "Sign out everywhere" }
            }
        },
    )
}
