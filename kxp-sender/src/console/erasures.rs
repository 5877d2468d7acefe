//! "Erase personal data": the account's erasures by tag, and the form that starts one (a
//! `manage` session's; through the service's [`erase`](app::erase), as the API's).

use axum::Form;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::endpoints::{page, refused};
use super::error::ConsoleError;
use super::pages;
use super::scope::InAccount;
use crate::app::{self, AppState, Error};
use crate::model::ConsoleAction;

/// Erasures listed.
const SHOWN: i64 = 100;

#[derive(Deserialize)]
pub(super) struct Erase {
    csrf_token: String,
    tag: String,
}

/// `GET /console/a/{account}/erasures`: the account's erasures, newest first, and the form.
pub(super) async fn list(
    State(state): State<AppState>,
    scope: InAccount,
) -> Result<Response, ConsoleError> {
    let erasures = state.db.erasures(&scope.account.id, SHOWN).await?;
    let running = erasures.iter().any(|e| e.status == "running");
    Ok(page(pages::erasures(&scope.frame(), &erasures, running)))
}

/// `POST /console/a/{account}/erasures`: erases a tag, then lists the erasures (the new one
/// first, refreshing until it is done).
pub(super) async fn erase(
    State(state): State<AppState>,
    scope: InAccount,
    Form(form): Form<Erase>,
) -> Result<Response, ConsoleError> {
    scope.check_form(&form.csrf_token)?;
    let actor = scope.actor(&state).await;
    let erasure = match app::erase(&state, &scope.account, form.tag.trim(), &actor, "console").await
    {
        Ok(erasure) => erasure,
        Err(Error::Invalid(message)) => return Ok(refused("Not erased", &message)),
        Err(e) => return Err(e.into()),
    };
    scope
        .audit(&state, ConsoleAction::Erasure, Some(erasure.id.as_str()))
        .await;
    Ok(Redirect::to(&scope.url("/erasures")).into_response())
}
