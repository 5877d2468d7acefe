//! The operators' pages: `/console` lists every account (a merchant's session is sent to its
//! own account's pages instead), `/console/audit` the changes made, `/console/notifications`
//! the notices sent to merchants. A merchant's session gets 404 for the last two.

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::endpoints::page;
use super::error::ConsoleError;
use super::pages;
use super::session::Signed;
use crate::app::AppState;
use crate::model::{Operator, SignedIn};

/// Rows per page of the logs.
const PAGE: i64 = 50;

/// `GET /console`.
pub(super) async fn home(
    State(state): State<AppState>,
    signed: Signed,
) -> Result<Response, ConsoleError> {
    if let SignedIn::Account { account, .. } = &signed.session.who {
        return Ok(Redirect::to(&format!("/console/a/{account}")).into_response());
    }
    let operator = operator(&state, &signed).await?;
    let overview = state.db.account_overviews().await?;
    let egress = state
        .shared
        .client
        .egress()
        .map(|egress| egress.health.view(egress.proxy.to_string()));
    let markup = pages::accounts(
        &operator.name,
        &signed.session.csrf_token,
        &overview,
        egress.as_ref(),
    );
    Ok(Html(markup.into_string()).into_response())
}

/// A log page's query: where the page starts.
#[derive(Deserialize)]
pub(super) struct Older {
    before: Option<String>,
}

/// `GET /console/audit`.
pub(super) async fn audit(
    State(state): State<AppState>,
    signed: Signed,
    Query(query): Query<Older>,
) -> Result<Response, ConsoleError> {
    operator(&state, &signed).await?;
    let mut entries = state
        .db
        .audit_log(query.before.as_deref(), PAGE + 1)
        .await?;
    let older = (entries.len() > PAGE as usize).then(|| {
        entries.truncate(PAGE as usize);
        format!("/console/audit?before={}", entries[entries.len() - 1].id)
    });
    let csrf = &signed.session.csrf_token;
    Ok(page(pages::audit(csrf, &entries, older.as_deref())))
}

/// `GET /console/notifications`.
pub(super) async fn notifications(
    State(state): State<AppState>,
    signed: Signed,
    Query(query): Query<Older>,
) -> Result<Response, ConsoleError> {
    operator(&state, &signed).await?;
    let mut sent = state
        .db
        .all_notifications(query.before.as_deref(), PAGE + 1)
        .await?;
    let older = (sent.len() > PAGE as usize).then(|| {
        sent.truncate(PAGE as usize);
        format!("/console/notifications?before={}", sent[sent.len() - 1].id)
    });
    let csrf = &signed.session.csrf_token;
    Ok(page(pages::notifications(csrf, &sent, older.as_deref())))
}

/// The operator of an operator's session; a merchant's gets 404 (no such page for it).
async fn operator(state: &AppState, signed: &Signed) -> Result<Operator, ConsoleError> {
    match &signed.session.who {
        SignedIn::Operator(id) => state
            .db
            .operator(id)
            .await?
            .ok_or(ConsoleError::SignInRequired),
        SignedIn::Account { .. } => Err(ConsoleError::NotFound),
    }
}
