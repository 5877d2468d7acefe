//! "Listen locally": a listen token (through the service's
//! [`create_listen_token`](app::create_listen_token), as the API's) in the full `kxp listen`
//! command. The token is never in the answer to the form that made it: the POST keeps it
//! sealed as the session's one-time message and redirects, and the page shows it once.

use axum::Form;
use axum::extract::State;
use axum::response::{Redirect, Response};
use serde::Deserialize;

use super::endpoints::page;
use super::error::ConsoleError;
use super::pages;
use super::scope::InAccount;
use crate::app::{self, AppState};
use crate::model::ConsoleAction;
use crate::store::seal::{open_stored, to_stored};

/// What the session's one-time message starts with when it holds a listen token.
const FLASH: &str = "listen";

/// What seals the token in the one-time message (bound to its purpose).
const CONTEXT: &[u8] = b"kxp/console-flash/listen-token";

#[derive(Deserialize)]
pub(super) struct Made {
    csrf_token: String,
}

/// `GET /console/a/{account}/listen`: how to listen locally, and the command with a new token
/// once, right after the form made it.
pub(super) async fn show(
    State(state): State<AppState>,
    scope: InAccount,
) -> Result<Response, ConsoleError> {
    let flash = state.db.take_flash(&scope.signed.cookie, FLASH).await?;
    let ring = state.shared.config.secrets_key.as_ref();
    let token = flash
        .as_deref()
        .and_then(|flash| flash.strip_prefix(FLASH)?.strip_prefix(' '))
        .map(|kept| match open_stored(ring, kept, CONTEXT) {
            Ok(token) => String::from_utf8_lossy(&token).into_owned(),
            Err(e) => format!("(the token cannot be shown: {e})"),
        });
    let api_url = state
        .shared
        .config
        .public_url
        .as_deref()
        .unwrap_or_default();
    Ok(page(pages::listen(
        &scope.frame(),
        api_url,
        token.as_deref(),
    )))
}

/// `POST /console/a/{account}/listen`: makes a listen token, then shows it once.
pub(super) async fn make(
    State(state): State<AppState>,
    scope: InAccount,
    Form(form): Form<Made>,
) -> Result<Response, ConsoleError> {
    scope.check_form(&form.csrf_token)?;
    let token = app::create_listen_token(&state, &scope.account, None).await?;
    let ring = state.shared.config.secrets_key.as_ref();
    let kept = to_stored(ring, &token.token, CONTEXT);
    state
        .db
        .set_flash(&scope.signed.cookie, &format!("{FLASH} {}", kept.as_str()))
        .await?;
    scope
        .audit(&state, ConsoleAction::ListenTokenCreate, None)
        .await;
    Ok(axum::response::IntoResponse::into_response(Redirect::to(
        &scope.url("/listen"),
    )))
}
