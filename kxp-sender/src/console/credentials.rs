//! An endpoint's credentials in the console: what it presents (header names, the kind of
//! authentication and its non-secret fields, its certificates) and three forms, which replace
//! the custom headers, the authentication, and the TLS settings. Credentials are write-only here as in the
//! API: the forms never show a value back, not even after a refusal. Both go through the
//! service's [`change`], so the same checks (and the challenge's credentials) apply.

use std::collections::BTreeMap;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use kxp_api::{ClientAuth, Credential, EndpointAuth, EndpointPatch, EndpointTls, Patch};

use super::endpoints::not_found;
use super::error::ConsoleError;
use super::pages;
use super::scope::InAccount;
use crate::app::{AppState, change};
use crate::model::{ConsoleAction, CredentialsView, EndpointId};

/// `GET …/endpoints/{endpoint}/credentials`: what the endpoint presents, and the two forms.
pub(super) async fn form(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
) -> Result<Response, ConsoleError> {
    scope.signed.check_may_change()?;
    shown(&state, &scope, &id, None, StatusCode::OK).await
}

async fn shown(
    state: &AppState,
    scope: &InAccount,
    id: &EndpointId,
    refused: Option<&str>,
    status: StatusCode,
) -> Result<Response, ConsoleError> {
    let endpoint = state
        .db
        .endpoint(&scope.account.id, id)
        .await
        .map_err(not_found)?;
    let view = CredentialsView::of_row(endpoint.credentials_view.as_deref());
    let markup = pages::credentials(&scope.frame(), &endpoint, &view, refused);
    Ok((status, Html(markup.into_string())).into_response())
}

/// `POST …/credentials/headers`: replaces the custom headers with the textarea's lines
/// (`Name: value`; none removes them all).
pub(super) async fn headers(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
    Form(fields): Form<BTreeMap<String, String>>,
) -> Result<Response, ConsoleError> {
    scope.check_form(fields.get("csrf_token").map_or("", String::as_str))?;
    let text = fields.get("headers").map_or("", String::as_str);
    let patch = match header_lines(text) {
        Ok(headers) if headers.is_empty() => patch(Patch::Clear, Patch::Unchanged),
        Ok(headers) => patch(Patch::Set(headers), Patch::Unchanged),
        Err(why) => return refuse(&state, &scope, &id, &why).await,
    };
    save(&state, &scope, &id, patch).await
}

/// `POST …/credentials/auth`: replaces the authentication with the form's (`none` removes it).
pub(super) async fn auth(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
    Form(fields): Form<BTreeMap<String, String>>,
) -> Result<Response, ConsoleError> {
    scope.check_form(fields.get("csrf_token").map_or("", String::as_str))?;
    let patch = match auth_of(&fields) {
        Ok(Some(auth)) => patch(Patch::Unchanged, Patch::Set(auth)),
        Ok(None) => patch(Patch::Unchanged, Patch::Clear),
        Err(why) => return refuse(&state, &scope, &id, &why).await,
    };
    save(&state, &scope, &id, patch).await
}

/// `POST …/credentials/tls`: replaces the client certificate, its key and the CA certificates
/// (all three empty removes them).
pub(super) async fn tls(
    State(state): State<AppState>,
    scope: InAccount,
    Path((_, id)): Path<(String, EndpointId)>,
    Form(fields): Form<BTreeMap<String, String>>,
) -> Result<Response, ConsoleError> {
    scope.check_form(fields.get("csrf_token").map_or("", String::as_str))?;
    let field = |name: &str| {
        fields
            .get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let mut tls = EndpointTls::default();
    tls.client_certificate = field("client_certificate");
    tls.client_key = field("client_key").map(Credential::from);
    tls.ca_certificates = field("ca_certificates");
    let mut patch = EndpointPatch::default();
    patch.tls = if tls == EndpointTls::default() {
        Patch::Clear
    } else {
        Patch::Set(tls)
    };
    save(&state, &scope, &id, patch).await
}

fn patch(headers: Patch<BTreeMap<String, Credential>>, auth: Patch<EndpointAuth>) -> EndpointPatch {
    let mut patch = EndpointPatch::default();
    patch.headers = headers;
    patch.auth = auth;
    patch
}

async fn save(
    state: &AppState,
    scope: &InAccount,
    id: &EndpointId,
    patch: EndpointPatch,
) -> Result<Response, ConsoleError> {
    match change(state, &scope.account, id, patch).await {
        Ok(_) => {
            tracing::info!(target: "kxp_sender", endpoint_id = %id, "endpoint credentials changed from the console");
            scope
                .audit(state, ConsoleAction::EndpointCredentials, Some(id.as_str()))
                .await;
            Ok(Redirect::to(&scope.url(&format!("/endpoints/{id}"))).into_response())
        }
        Err(crate::app::Error::NotFound) => Err(ConsoleError::NotFound),
        Err(refused) => refuse(state, scope, id, &refused.to_string()).await,
    }
}

async fn refuse(
    state: &AppState,
    scope: &InAccount,
    id: &EndpointId,
    why: &str,
) -> Result<Response, ConsoleError> {
    shown(
        state,
        scope,
        id,
        Some(why),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await
}

/// The textarea's `Name: value` lines (blank lines skipped) as headers.
fn header_lines(text: &str) -> Result<BTreeMap<String, Credential>, String> {
    let mut headers = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("line {}: write `Name: value`", n + 1));
        };
        headers.insert(name.trim().to_owned(), Credential::from(value.trim()));
    }
    Ok(headers)
}

/// The authentication the form describes; `None` for `none`. Fields of other kinds are
/// ignored; empty optional fields are left out.
fn auth_of(fields: &BTreeMap<String, String>) -> Result<Option<EndpointAuth>, String> {
    let field = |name: &str| fields.get(name).map_or("", |v| v.trim()).to_owned();
    let optional = |name: &str| Some(field(name)).filter(|v| !v.is_empty());
    let json = match fields.get("type").map_or("none", String::as_str) {
        "none" => return Ok(None),
        "basic" => serde_json::json!({
            "type": "basic", "username": field("username"), "password": field("password"),
        }),
        "bearer" => serde_json::json!({"type": "bearer", "token": field("token")}),
        "oauth2_client_credentials" => serde_json::json!({
            "type": "oauth2_client_credentials",
            "token_url": field("token_url"),
            "client_id": field("client_id"),
            "client_secret": field("client_secret"),
            "scope": optional("scope"),
            "audience": optional("audience"),
            "client_auth": ClientAuth::parse(&field("client_auth")),
        }),
        other => return Err(format!("unknown authentication `{}`", other.escape_debug())),
    };
    serde_json::from_value(json)
        .map(Some)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_read_name_value_pairs() {
        let headers = header_lines("X-Gateway-Key: k:1\n\n  X-Tenant :t \n").unwrap();
        assert_eq!(headers.len(), 2);
        assert_eq!(headers["X-Gateway-Key"].expose(), "k:1");
        assert_eq!(headers["X-Tenant"].expose(), "t");
        assert!(header_lines("no colon").is_err());
        assert!(header_lines("").unwrap().is_empty());
    }
}
