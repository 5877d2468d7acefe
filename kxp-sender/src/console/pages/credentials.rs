//! An endpoint's credentials page: what each delivery presents beside its signature, and the
//! forms that replace the custom headers and the authentication. No credential's value is ever
//! written into the page: the fields are always empty.

use kxp_api::{CertificateInfo, EndpointAuthView};
use maud::{Markup, html};

use super::{Frame, account_page};
use crate::model::{CredentialsView, Endpoint};

/// What the endpoint presents, as its page and the credentials page list it.
pub(in crate::console) fn presented(view: &CredentialsView) -> Markup {
    html! {
        dt { "Custom headers" } dd { @if view.headers.is_empty() { "none" } @else {
            @for (i, name) in view.headers.iter().enumerate() {
                @if i > 0 { ", " } code { (name) }
            }
            " (values are write-only)"
        } }
        dt { "Authentication" } dd { (auth(view.auth.as_ref())) }
        dt { "Client certificate" } dd {
            @match view.tls.as_ref().and_then(|tls| tls.client_certificate.as_ref()) {
                Some(cert) => { (certificate(cert)) " (the key is write-only)" }
                None => { "none" }
            }
        }
        dt { "Trusted CAs" } dd {
            @match view.tls.as_ref().filter(|tls| !tls.ca_certificates.is_empty()) {
                Some(tls) => { @for (i, ca) in tls.ca_certificates.iter().enumerate() {
                    @if i > 0 { "; " } (certificate(ca))
                } " (instead of the public roots)" }
                None => { "the public roots" }
            }
        }
    }
}

fn certificate(cert: &CertificateInfo) -> Markup {
    html! {
        code { (cert.subject) } ", issued by " code { (cert.issuer) } ", expires " (cert.not_after)
        ", SHA-256 " code { (cert.sha256) }
    }
}

fn auth(auth: Option<&EndpointAuthView>) -> Markup {
    match auth {
        None => html! { "the signature only" },
        Some(EndpointAuthView::Basic { username, .. }) => {
            html! { "HTTP Basic as " code { (username) } }
        }
        Some(EndpointAuthView::Bearer { .. }) => html! { "a bearer token" },
        Some(EndpointAuthView::Oauth2ClientCredentials {
            token_url,
            client_id,
            scope,
            audience,
            client_auth,
            ..
        }) => html! {
            "OAuth2 client credentials: client " code { (client_id) } " at " code { (token_url) }
            " (" (client_auth) ")"
            @if let Some(scope) = scope { ", scope " code { (scope) } }
            @if let Some(audience) = audience { ", audience " code { (audience) } }
        },
        Some(other) => html! { (other.kind()) },
    }
}

/// The credentials page of `endpoint`; `refused` says why the last change was not saved.
pub(in crate::console) fn credentials(
    frame: &Frame<'_>,
    endpoint: &Endpoint,
    view: &CredentialsView,
    refused: Option<&str>,
) -> Markup {
    let action = |rest: &str| frame.url(&format!("/endpoints/{}/credentials/{rest}", endpoint.id));
    let main = html! {
        @if let Some(why) = refused {
            p.error role="alert" { "Not saved: " (why) }
        }
        p { "What each delivery to " code { (endpoint.url) } " presents beside its signature, for a "
            "receiver behind an API gateway. Values are sealed at rest and never shown again: "
            "each form replaces what it covers." }
        dl { (presented(view)) }
        h2 { "Custom headers" }
        form.stack method="post" action=(action("headers")) {
            (frame.csrf())
            label for="headers" { "One " code { "Name: value" } " per line, at most 20 (empty: none)" }
            textarea #headers name="headers" rows="4" autocomplete="off" spellcheck="false" {}
            button type="submit" { "Replace the headers" }
        }
        h2 { "Authentication" }
        form.stack method="post" action=(action("auth")) {
            (frame.csrf())
            label for="type" { "Kind" }
            select #type name="type" {
                option value="none" { "None: the signature only" }
                option value="basic" { "HTTP Basic" }
                option value="bearer" { "Bearer token" }
                option value="oauth2_client_credentials" { "OAuth2 client credentials" }
            }
            fieldset {
                legend { "HTTP Basic" }
                label for="username" { "User name" }
                input #username type="text" name="username" autocomplete="off";
                label for="password" { "Password" }
                input #password type="password" name="password" autocomplete="new-password";
            }
            fieldset {
                legend { "Bearer token" }
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off";
            }
            fieldset {
                legend { "OAuth2 client credentials" }
                label for="token_url" { "Token URL" }
                input #token_url type="url" name="token_url" placeholder="https://auth.example.com/oauth/token";
                label for="client_id" { "Client id" }
                input #client_id type="text" name="client_id" autocomplete="off";
                label for="client_secret" { "Client secret" }
                input #client_secret type="password" name="client_secret" autocomplete="new-password";
                label for="scope" { "Scope (optional)" }
                input #scope type="text" name="scope";
                label for="audience" { "Audience (optional)" }
                input #audience type="text" name="audience";
                label for="client_auth" { "Client authentication" }
                select #client_auth name="client_auth" {
                    option value="basic" { "HTTP Basic (client_secret_basic)" }
                    option value="post" { "In the form (client_secret_post)" }
                }
            }
            button type="submit" { "Replace the authentication" }
        }
        h2 { "Mutual TLS and a private CA" }
        form.stack method="post" action=(action("tls")) {
            (frame.csrf())
            label for="client_certificate" { "Client certificate (PEM; its chain may follow)" }
            textarea #client_certificate name="client_certificate" rows="4" spellcheck="false" {}
            label for="client_key" { "Its private key (PEM)" }
            textarea #client_key name="client_key" rows="4" autocomplete="off" spellcheck="false" {}
            label for="ca_certificates" { "CA certificates the endpoint's certificate must chain to (PEM; empty: the public roots)" }
            textarea #ca_certificates name="ca_certificates" rows="4" spellcheck="false" {}
            p { small { "All three empty: no client certificate, and the public roots." } }
            button type="submit" { "Replace the TLS settings" }
        }
    };
    account_page(frame, "Endpoint credentials", main)
}
