//! The endpoints pages: the list with each endpoint's health at a glance, the registration
//! form, one endpoint with its actions, and the confirmation before a deletion.

use kxp_api::{EndpointDetails, ReceiverKey, Rotation};
use maud::{Markup, html};

use super::{Frame, account_page, account_page_with_script, chart};

use crate::model::{
    CircuitState, CredentialsView, Endpoint, EndpointHealth, EndpointStatus, rfc3339,
};

/// One line of the endpoints list.
pub(in crate::console) struct EndpointRow {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Its health.
    pub health: EndpointHealth,
}

/// What the registration form holds: what was typed, to show again after a refusal.
#[derive(Default)]
pub(in crate::console) struct EndpointForm {
    /// The URL.
    pub url: String,
    /// The event types ticked among the known ones.
    pub types: Vec<String>,
    /// More types, typed in (comma-separated; `prefix.*` allowed).
    pub other_types: String,
    /// The description.
    pub description: String,
    /// The timeout in milliseconds, as typed.
    pub timeout_ms: String,
    /// The rate limit per second, as typed.
    pub rate_limit: String,
    /// Thin deliveries ([`kxp_api::PayloadMode::Thin`]).
    pub thin: bool,
}

/// A secret shown once, right after it was made.
pub(in crate::console) struct NewSecret {
    /// The secret.
    pub secret: String,
    /// When the secrets it replaces stop signing (Unix ms), after a rotation.
    pub previous_expire_at: Option<i64>,
}

/// What a deletion would do, to confirm.
pub(in crate::console) struct DeleteConfirm<'a> {
    /// The endpoint.
    pub endpoint: &'a Endpoint,
    /// Its unfinished deliveries, which become dead.
    pub unfinished: i64,
}

/// The account's endpoints, with their health.
pub(in crate::console) fn endpoints(
    frame: &Frame<'_>,
    rows: &[EndpointRow],
    signed_in: bool,
) -> Markup {
    let main = html! {
        // Just after a portal link's sign-in: which account this is, in words, so that a link
        // to an account named like another is noticed.
        @if signed_in {
            p.notice role="status" {
                "Signed in to " (frame.account_name) " (" (frame.account_id) ")"
            }
        }
        @if frame.may_change {
            p { a.button href=(frame.url("/endpoints/new")) { "Register an endpoint" } " "
                a.button href=(frame.url("/listen")) { "Listen locally" } }
        }
        @if rows.is_empty() {
            p { "No endpoints yet." }
        } @else {
            table {
                caption { "Health over the last 24 hours" }
                thead { tr {
                    th scope="col" { "Endpoint" } th scope="col" { "State" }
                    th scope="col" { "Success" } th scope="col" { "p95" }
                    th scope="col" { "Pending" } th scope="col" { "Dead" }
                    th scope="col" { "Last 24 h" }
                } }
                tbody {
                    @for row in rows {
                        @let window = &row.health.last_24h;
                        tr {
                            td { a href=(frame.url(&format!("/endpoints/{}", row.endpoint.id))) { (shown_url(&row.endpoint)) }
                                @if !row.endpoint.description.is_empty() { br; small { (row.endpoint.description) } } }
                            td { (state(&row.endpoint)) @if let Some(pull) = &row.health.pull { br; small { (lag(pull)) } } }
                            td { (rate(window.success_rate)) }
                            td { (latency(window.latency_p95_ms)) }
                            td { (row.health.pending) }
                            td {
                                @if row.health.dead > 0 {
                                    a href=(frame.url(&format!("/dead-letters?endpoint={}", row.endpoint.id))) { (row.health.dead) }
                                } @else { "0" }
                            }
                            td { (chart::hours(&row.health.hours)) }
                        }
                    }
                }
            }
        }
    };
    account_page(frame, "Endpoints", main)
}

/// What stands for an endpoint's URL: a pull endpoint has none.
fn shown_url(endpoint: &Endpoint) -> String {
    if endpoint.is_pull() {
        let kind = if endpoint.temporary {
            "temporary pull endpoint"
        } else {
            "pull endpoint"
        };
        format!("{kind} {}", endpoint.id)
    } else {
        endpoint.url.clone()
    }
}

/// A pull endpoint's reader in words: how far behind it is, and since when.
fn lag(pull: &kxp_api::PullHealth) -> Markup {
    html! {
        (pull.lag) " unread of " (pull.latest)
        @match &pull.committed_at {
            Some(at) => { ", last commit " (at) }
            None => { ", never committed" }
        }
    }
}

/// An endpoint's state in words: its status, and its circuit when that is not closed.
fn state(endpoint: &Endpoint) -> Markup {
    let status = match endpoint.status {
        EndpointStatus::Active => "active",
        EndpointStatus::Paused => "paused",
        EndpointStatus::Disabled => "disabled",
        _ => endpoint.status.as_str(),
    };
    html! {
        span class={ "state " (status) } { (status) }
        @match endpoint.circuit_state {
            CircuitState::Open => { ", " span.state.open { "circuit open" } }
            CircuitState::HalfOpen => { ", " span.state.open { "circuit probing" } }
            _ => {}
        }
    }
}

fn rate(rate: Option<f64>) -> Markup {
    match rate {
        Some(rate) => html! { (format!("{:.1}%", rate * 100.0)) },
        None => html! { "–" },
    }
}

fn latency(ms: Option<i64>) -> Markup {
    match ms {
        Some(ms) => html! { "≤ " (ms) " ms" },
        None => html! { "–" },
    }
}

/// Which form [`endpoint_form`] is: registering a new endpoint, or editing one.
pub(in crate::console) enum FormFor<'a> {
    /// A new endpoint (the secret is made and shown once).
    Registration,
    /// This endpoint's settings.
    Edit(&'a Endpoint),
}

/// The registration form; `refused` says why the last try did not register.
pub(in crate::console) fn register(
    frame: &Frame<'_>,
    known_types: &[String],
    form: &EndpointForm,
    refused: Option<&str>,
) -> Markup {
    endpoint_form(frame, &FormFor::Registration, known_types, form, refused)
}

/// The registration or edit form, holding `form`; `refused` says why the last try did not go
/// through.
pub(in crate::console) fn endpoint_form(
    frame: &Frame<'_>,
    purpose: &FormFor<'_>,
    known_types: &[String],
    form: &EndpointForm,
    refused: Option<&str>,
) -> Markup {
    let (title, action, button, not_done) = match purpose {
        FormFor::Registration => (
            "Register an endpoint".to_owned(),
            frame.url("/endpoints"),
            "Register",
            "Not registered: ",
        ),
        FormFor::Edit(endpoint) => (
            "Edit the endpoint".to_owned(),
            frame.url(&format!("/endpoints/{}/edit", endpoint.id)),
            "Save",
            "Not saved: ",
        ),
    };
    let main = html! {
        @if let Some(why) = refused {
            p.error role="alert" { (not_done) (why) }
        }
        p { "The endpoint must answer the challenge"
            @if matches!(purpose, FormFor::Edit(_)) { " when its URL changes" }
            ": a GET of the URL with "
            code { "?challenge=<token>" } " answered with a 2xx and the token as the whole body, as the kxp receivers do." }
        form.stack method="post" action=(action) {
            (frame.csrf())
            label for="url" { "URL" }
            input #url type="url" name="url" required value=(form.url) placeholder="https://example.com/webhooks";
            fieldset {
                legend { "Event types" }
                @if known_types.is_empty() {
                    p { small { "No event types are known yet: type them below, or leave both empty for every type." } }
                }
                @for (i, known) in known_types.iter().enumerate() {
                    @let id = format!("type-{i}");
                    span.check {
                        input id=(id) type="checkbox" name="types" value=(known) checked[form.types.contains(known)];
                        label for=(id) { (known) }
                    }
                }
                label for="other_types" { "Other types (comma-separated; " code { "payment.*" } " for a prefix; empty: every type)" }
                input #other_types type="text" name="other_types" value=(form.other_types);
            }
            label for="description" { "Description" }
            input #description type="text" name="description" maxlength="512" value=(form.description);
            label for="timeout_ms" { "Timeout (ms, 100 to 30000; empty: "
                @if matches!(purpose, FormFor::Edit(_)) { "unchanged" } @else { "the server's default" } ")" }
            input #timeout_ms type="number" name="timeout_ms" min="100" max="30000" value=(form.timeout_ms);
            label for="rate_limit" { "Rate limit (deliveries per second; empty: none)" }
            input #rate_limit type="number" name="rate_limit" min="1" max="10000" value=(form.rate_limit);
            span.check {
                input #thin type="checkbox" name="thin" value="on" checked[form.thin];
                label for="thin" { "Thin deliveries: send only the event's id, type, version and time; the receiver fetches the event (kxp-axum or kxp-actix with " code { "thin_events" } ")" }
            }
            button type="submit" { (button) }
        }
    };
    account_page(frame, &title, main)
}

/// One endpoint: its settings, secrets, health and actions; `secret` is shown when it was just
/// made.
pub(in crate::console) fn endpoint(
    frame: &Frame<'_>,
    endpoint: &Endpoint,
    health: &EndpointHealth,
    details: &EndpointDetails,
    secret: Option<&NewSecret>,
) -> Markup {
    let here = frame.url(&format!("/endpoints/{}", endpoint.id));
    let action = |verb: &str| format!("{here}/{verb}");
    let window = &health.last_24h;
    let main = html! {
        @if let Some(new) = secret {
            section.secret aria-labelledby="secret-heading" {
                h2 #secret-heading { "Signing secret" }
                p { "Shown this once: copy it into the receiver's configuration now. It is not shown again." }
                p { code #secret { (new.secret) } " "
                    button type="button" data-copy="secret" hidden { "Copy" } }
                @if let Some(at) = new.previous_expire_at {
                    p { "The previous secret keeps signing until " (rfc3339(at)) "." }
                }
            }
        }
        dl {
            @if endpoint.is_pull() {
                dt { "Mode" } dd { "pull: its receiver reads the feed, nothing is sent"
                    @if endpoint.temporary { " (temporary: " code { "kxp listen" } "'s)" } }
                @if let Some(pull) = &health.pull { dt { "Reader" } dd { (lag(pull)) } }
            } @else {
                dt { "URL" } dd { code { (endpoint.url) } }
            }
            dt { "Id" } dd { code { (endpoint.id) } }
            @if !endpoint.description.is_empty() { dt { "Description" } dd { (endpoint.description) } }
            dt { "Event types" } dd { (endpoint.types().join(", ")) }
            dt { "Filter" } dd {
                @match &endpoint.content_filter {
                    Some(filter) => { code { (filter) } }
                    None => { "none: every event of its types" }
                }
                " (" a href=(action("filter")) { "try a filter" } ")"
            }
            dt { "State" } dd { (state(endpoint)) }
            dt { "Timeout" } dd { (endpoint.timeout_ms) " ms" }
            dt { "Rate limit" } dd { @match endpoint.rate_limit_per_second { Some(n) => { (n) " per second" } None => { "none" } } }
            dt { "Signed with" } dd { (signing_name(&details.endpoint.signing)) }
            dt { "Format" } dd { (format_name(&details.endpoint.format)) }
            dt { "Payload encryption" } dd { @match &endpoint.encryption_jwk {
                Some(jwk) => { code { "data" } " sent encrypted as " code { "data_jwe" } " to " (super::events::key_name(jwk)) }
                None => { "none: " code { "data" } " is sent in the clear" } } }
            dt { "Deliveries carry" } dd { @if endpoint.payload_mode == kxp_api::PayloadMode::Thin {
                "a thin notice (id, type, version, time): the receiver fetches the event"
            } @else { "the whole event" } }
            dt { "Trace propagation" } dd { @if endpoint.trace_propagation {
                "on: each delivery carries a " code { "traceparent" } " naming its attempt's span"
            } @else { "off: deliveries carry no " code { "traceparent" } } }
            (super::credentials::presented(&CredentialsView::of_row(endpoint.credentials_view.as_deref())))
        }
        h2 { "Signing secrets" }
        @if let Some(rotation) = &details.rotation {
            p.rotation { (rotation_state(rotation)) }
        }
        table {
            thead { tr { th scope="col" { "Fingerprint" } th scope="col" { "Kind" } th scope="col" { "Made" } th scope="col" { "Stops signing" } th scope="col" { "Last verified by the receiver" } } }
            tbody {
                @for s in &details.secrets {
                    tr {
                        td { code { (s.fingerprint) } }
                        td { (signing_name(&s.kind)) ", " (format_name(&s.format)) }
                        td { (s.created_at) }
                        td { @match &s.expires_at { Some(at) => { (at) } None => { "at the next rotation" } } }
                        td { @match &s.last_verified_at { Some(at) => { (at) } None => { "never said" } } }
                    }
                }
            }
        }
        h2 { "Health" }
        @for cert in &health.expiring_certificates {
            p.notice role="status" { (expiring(cert)) }
        }
        dl {
            dt { "Success, last 24 h" } dd { (rate(window.success_rate)) " of " (window.attempts) " attempts" }
            dt { "p95 latency" } dd { (latency(window.latency_p95_ms)) }
            dt { "Failures in a row" } dd { (health.consecutive_failures) }
            @if let Some(error) = &health.last_error { dt { "Last error" } dd { code { (error) } } }
            dt { "Pending" } dd { (health.pending) " (" (health.due) " due now)" }
            dt { "Dead" } dd { a href=(frame.url(&format!("/dead-letters?endpoint={}", endpoint.id))) { (health.dead) } }
            dt { "Server certificate" } dd { @match &health.server_certificate {
                Some(cert) => { "issued by " code { (cert.issuer) } ", expires " (cert.not_after) " (seen " (cert.seen_at) ")" }
                None => { "not seen yet (recorded at a TLS handshake)" } } }
        }
        (chart::hours(&health.hours))
        @if frame.may_change && endpoint.status != EndpointStatus::Deleted {
            h2 { "Actions" }
            div.actions {
                @if endpoint.status == EndpointStatus::Active {
                    form.inline method="post" action=(action("pause")) { (frame.csrf()) button type="submit" { "Pause" } }
                } @else {
                    form.inline method="post" action=(action("resume")) { (frame.csrf()) button type="submit" { "Resume" } }
                }
                form.inline method="post" action=(action("test")) { (frame.csrf()) button type="submit" { "Send a test event" } }
                form.inline method="post" action=(action("rotate")) { (frame.csrf()) button type="submit" { "Rotate the secret" } }
                form.inline method="post" action=(action("rotate-when-confirmed")) { (frame.csrf()) button type="submit" { "Rotate, ending when the receiver confirms" } }
                // A pull endpoint's settings are an attempt's (URL, timeout, credentials): none
                // apply to it.
                @if !endpoint.is_pull() {
                    a.button href=(action("edit")) { "Edit…" }
                    a.button href=(action("credentials")) { "Credentials…" }
                }
                a.button href=(action("filter")) { "Filter…" }
                a.button href=(action("delete")) { "Delete…" }
            }
        }
    };
    let script = secret.is_some().then_some("/console/assets/console.js");
    account_page_with_script(frame, "Endpoint", main, script)
}

/// What a `when_confirmed` rotation waits for, in the merchant's terms.
/// A certificate that expires soon, in words.
fn expiring(cert: &kxp_api::ExpiringCertificate) -> String {
    let which = match cert.certificate {
        kxp_api::CertificateRole::Client => "The client certificate this endpoint presents",
        _ => "The endpoint's own TLS certificate",
    };
    match cert.days_left {
        days if days < 0 => format!("{which} expired on {}.", cert.not_after),
        0 => format!("{which} expires today ({}).", cert.not_after),
        days => format!("{which} expires in {days} days ({}).", cert.not_after),
    }
}

fn rotation_state(rotation: &Rotation) -> Markup {
    let progress = format!(
        "{} of {} deliveries in a row",
        rotation.confirmations, rotation.needed
    );
    html! {
        @match &rotation.receiver {
            ReceiverKey::New => {
                strong { "The merchant has switched: " }
                "the receiver verifies with the new secret " code { (rotation.secret) } " (" (progress)
                "). The old secret stops signing when the count is reached, at the latest at " (rotation.ends_by) "."
            }
            ReceiverKey::Old => {
                strong { "Still on the old secret: " }
                "the receiver verified its latest delivery with an older secret. It keeps signing until the receiver has verified "
                (rotation.needed) " deliveries in a row with " code { (rotation.secret) } ", at the latest until " (rotation.ends_by) "."
            }
            _ => {
                strong { "No word from the receiver yet: " }
                "it has not said which secret verified a delivery since the rotation (a receiver that does not answer "
                code { "X-Kxp-Verified-Key" } " never will). The old secret stops signing at " (rotation.ends_by) "."
            }
        }
    }
}

/// The question before a deletion, with what it does to the endpoint's deliveries.
pub(in crate::console) fn delete_confirm(frame: &Frame<'_>, confirm: &DeleteConfirm<'_>) -> Markup {
    let here = frame.url(&format!("/endpoints/{}", confirm.endpoint.id));
    let main = html! {
        p { "Delete " code { (confirm.endpoint.url) } "? It receives nothing more." }
        p.warning { strong { (confirm.unfinished) } " unfinished "
            (if confirm.unfinished == 1 { "delivery becomes" } else { "deliveries become" })
            " dead (kept in the dead letters, and never sent to this endpoint)." }
        form.inline method="post" action=(format!("{here}/delete")) {
            (frame.csrf())
            button.danger type="submit" { "Delete the endpoint" }
        }
        a href=(here) { "Keep it" }
    };
    account_page(frame, "Delete the endpoint", main)
}

/// What signs, in words.
fn signing_name(signing: &kxp_api::Signing) -> &str {
    match signing {
        kxp_api::Signing::Hmac => "HMAC secret",
        kxp_api::Signing::Ed25519 => "Ed25519 key",
        kxp_api::Signing::Both => "HMAC secret and Ed25519 key",
        other => other.as_str(),
    }
}

/// Which headers, in words.
fn format_name(format: &kxp_api::Format) -> &str {
    match format {
        kxp_api::Format::Kxp => "kxp (X-Kxp-Signature)",
        kxp_api::Format::StandardWebhooks => "Standard Webhooks (webhook-signature)",
        other => other.as_str(),
    }
}

/// "Listen locally": how to bring the account's events to a laptop with `kxp listen`, and a
/// new listen token in the full command, shown once.
pub(in crate::console) fn listen(frame: &Frame<'_>, api_url: &str, token: Option<&str>) -> Markup {
    let main = html! {
        p { "Forward this account's real events to a receiver on your machine, with no tunnel and "
            "no public URL: " code { "kxp listen" } " makes a temporary pull endpoint, forwards each "
            "event to the URL you give it, signed, and deletes the endpoint when you stop it (Ctrl-C)." }
        @match token {
            Some(token) => {
                section.secret aria-labelledby="listen-heading" {
                    h2 #listen-heading { "Your command" }
                    p { "Shown this once. The token in it can only make, read and delete temporary "
                        "pull endpoints of this account, and stops working in 8 hours." }
                    // The token in the environment, not in the arguments, where `ps` shows it.
                    p { code #listen-command { "KXP_LISTEN_TOKEN=" (token) " kxp listen --api-url " (api_url)
                        " --forward-to http://localhost:3000/webhooks" } " "
                        button type="button" data-copy="listen-command" hidden { "Copy" } }
                    p { "It prints the signing secret first: start your receiver with it ("
                        code { "KXP_WEBHOOK_SECRET" } ")." }
                }
            }
            None => {
                @if frame.may_change {
                    form method="post" action=(frame.url("/listen")) {
                        (frame.csrf())
                        button type="submit" { "Make a listen command" }
                    }
                } @else {
                    p { "A read-only session cannot make listen tokens." }
                }
            }
        }
    };
    let script = token.is_some().then_some("/console/assets/console.js");
    account_page_with_script(frame, "Listen locally", main, script)
}
