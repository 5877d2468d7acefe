//! The operators' pages: every account with its counts (each a way into that account's pages),
//! the audit log of changes, and the log of notifications sent to merchants.

use kxp_api::EgressProxyHealth;
use maud::{Markup, html};

use super::frame_page;
use crate::model::{AccountsOverview, AuditEntry, Notification, rfc3339};

/// The header of the operators' pages: their sections and signing out.
fn operator_header(csrf_token: &str) -> Markup {
    html! {
        nav aria-label="Sections" {
            a href="/console" { "Accounts" } " · "
            a href="/console/audit" { "Audit log" } " · "
            a href="/console/notifications" { "Notifications" }
        }
        div.session {
            form.inline method="post" action="/console/sign-out" {
                input type="hidden" name="csrf_token" value=(csrf_token);
                button type="submit" { "Sign out" }
            }
            form.inline method="post" action="/console/sign-out-everywhere" {
                input type="hidden" name="csrf_token" value=(csrf_token);
                button type="submit" { "Sign out everywhere" }
            }
        }
    }
}

/// The operators' home: every account with its counts, each a way into its pages, and the
/// egress proxy's state when there is one (a failing proxy holds every account's deliveries).
pub(in crate::console) fn accounts(
    operator: &str,
    csrf_token: &str,
    overview: &AccountsOverview,
    egress: Option<&EgressProxyHealth>,
) -> Markup {
    let sign_out = operator_header(csrf_token);
    let accounts = &overview.accounts;
    let main = html! {
        p { "Signed in as the operator " strong { (operator) } "." }
        @if overview.unanswered_shards > 0 {
            p role="alert" {
                strong { (overview.unanswered_shards) " shards of the database did not answer" }
                ": the accounts they hold are missing from this list (a Citus worker is down)."
            }
        }
        @if let Some(egress) = egress {
            @if egress.state == "up" {
                p { "Deliveries leave through the egress proxy " code { (egress.proxy) } "." }
            } @else {
                p role="alert" {
                    strong { "The egress proxy " code { (egress.proxy) } " is failing" }
                    ": deliveries wait for it, and no attempt is counted against an endpoint. "
                    @if let Some(why) = &egress.last_error { (why) }
                }
            }
        }
        @if accounts.is_empty() {
            p { "No accounts yet." }
        } @else {
            table {
                caption { "Accounts" }
                thead { tr {
                    th scope="col" { "Account" } th scope="col" { "Endpoints" }
                    th scope="col" { "Open circuits" } th scope="col" { "Dead deliveries" }
                } }
                tbody {
                    @for overview in accounts {
                        @let id = overview.account.id.as_str();
                        tr {
                            td { a href={ "/console/a/" (id) } { (overview.account.name) } br; small { code { (id) } } }
                            td { (overview.endpoints) }
                            td { (overview.open_circuits) }
                            td {
                                @if overview.dead > 0 {
                                    a href={ "/console/a/" (id) "/dead-letters" } { (overview.dead) }
                                } @else { "0" }
                            }
                        }
                    }
                }
            }
        }
    };
    frame_page("Accounts", sign_out, main, None)
}

/// The audit log, newest first; `older` links to the next page.
pub(in crate::console) fn audit(
    csrf_token: &str,
    entries: &[AuditEntry],
    older: Option<&str>,
) -> Markup {
    let main = html! {
        p { "Every change made in the console, or through the API with an operator key." }
        @if entries.is_empty() { p { "Nothing yet." } } @else {
            table {
                caption { "Changes, newest first" }
                thead { tr { th scope="col" { "When" } th scope="col" { "Who" } th scope="col" { "Via" }
                    th scope="col" { "Account" } th scope="col" { "What" } th scope="col" { "On" } } }
                tbody {
                    @for entry in entries {
                        tr {
                            td { (rfc3339(entry.at)) }
                            td { (entry.actor_name) br; small { (entry.actor_kind) " " code { (entry.actor_id) } } }
                            td { (entry.via) }
                            td { @if let Some(account) = &entry.account_id {
                                a href={ "/console/a/" (account) } { code { (account) } } } }
                            td { code { (entry.action) } }
                            td { @if let Some(target) = &entry.target { code { (target) } } }
                        }
                    }
                }
            }
        }
        @if let Some(older) = older { p { a href=(older) { "Older →" } } }
    };
    frame_page("Audit log", operator_header(csrf_token), main, None)
}

/// The notifications sent (or being sent) to merchants, newest first.
pub(in crate::console) fn notifications(
    csrf_token: &str,
    notifications: &[Notification],
    older: Option<&str>,
) -> Markup {
    let main = html! {
        p { "Operational notices to merchants: a circuit opened, an endpoint was disabled, and the like." }
        @if notifications.is_empty() { p { "None yet." } } @else {
            table {
                caption { "Notifications, newest first" }
                thead { tr { th scope="col" { "When" } th scope="col" { "Account" } th scope="col" { "What" }
                    th scope="col" { "To" } th scope="col" { "Status" } } }
                tbody {
                    @for n in notifications {
                        tr {
                            td { (rfc3339(n.created_at)) }
                            td { a href={ "/console/a/" (n.account_id) } { code { (n.account_id) } } }
                            td { code { (n.kind) } " " small { "endpoint " code { (n.endpoint_id) } } }
                            td { (n.channel) ": " (n.target) }
                            td { (n.status)
                                @if let Some(error) = &n.last_error { br; small { code { (error) } } } }
                        }
                    }
                }
            }
        }
        @if let Some(older) = older { p { a href=(older) { "Older →" } } }
    };
    frame_page("Notifications", operator_header(csrf_token), main, None)
}
