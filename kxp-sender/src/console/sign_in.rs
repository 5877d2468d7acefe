//! Signing in and out. A portal link's page (`GET /console/sign-in/<token>`) and the
//! operators' key form (`GET /console/sign-in`) change nothing; their forms POST to
//! `/console/sign-in`, which consumes the link (or checks the key), opens a fresh session and
//! sets its cookie. Signing out ends this session, or every session of the same account or
//! operator. No token, key or cookie value is ever logged.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{AppendHeaders, Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::cookies::{self, SESSION, SIGN_IN, SIGN_IN_PATH};
use super::error::ConsoleError;
use super::pages;
use super::session::{CsrfForm, Signed, same_secret};
use crate::http::AppState;
use crate::model::{KeyKind, Session, random_hex_32};
use crate::policy::session::ABSOLUTE_EXPIRY_MS;
use crate::store::Opening;

/// What the sign-in forms post: the link page's token, or the key form's key.
#[derive(Deserialize)]
pub(super) struct SignInForm {
    /// Must equal the sign-in cookie the page set.
    #[serde(default)]
    csrf_token: String,
    /// A portal link's token.
    token: Option<String>,
    /// An operator key.
    key: Option<String>,
}

/// `GET /console/sign-in/<token>`: a page whose button posts the token. It does not look the
/// token up: a GET uses nothing up, and tells nothing about the link.
pub(super) async fn link_page(
    State(state): State<AppState>,
    Path(token): Path<String>,
) -> Response {
    let csrf_token = random_hex_32();
    let page = pages::link_page(&token, &csrf_token);
    with_sign_in_cookie(&state, &csrf_token, page.into_string())
}

/// `GET /console/sign-in`: the operators' key form.
pub(super) async fn key_form(State(state): State<AppState>) -> Response {
    let csrf_token = random_hex_32();
    let page = pages::key_form(&csrf_token, false);
    with_sign_in_cookie(&state, &csrf_token, page.into_string())
}

/// `POST /console/sign-in`: a portal link's token opens an account session (once); an
/// operator key opens an operator session. A wrong key gets the form again (401), and no
/// word of why.
pub(super) async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Result<Response, ConsoleError> {
    let cookie = cookies::get(&headers, SIGN_IN).unwrap_or_default();
    if !same_secret(&form.csrf_token, cookie) {
        return Err(ConsoleError::CsrfMismatch);
    }
    let opening = match (&form.token, &form.key) {
        (Some(token), _) => Opening::Link(token),
        (None, Some(key)) if KeyKind::of(key) == KeyKind::Operator => {
            match state.db.operator_by_key(key).await? {
                Some(operator) => Opening::Operator(operator.id),
                None => return Ok(wrong_key(&form.csrf_token)),
            }
        }
        (None, _) => return Ok(wrong_key(&form.csrf_token)),
    };
    let is_link = matches!(opening, Opening::Link(_));
    let Some((session, id)) = state.db.open_session(opening).await? else {
        return Err(ConsoleError::LinkUnusable);
    };
    log_sign_in(&session, is_link);
    let secure = !state.shared.config.dev;
    let max_age = ABSOLUTE_EXPIRY_MS / 1000;
    let cookies = AppendHeaders([
        (
            SET_COOKIE,
            cookies::set(SESSION, &id, "/console", max_age, secure),
        ),
        (
            SET_COOKIE,
            cookies::set(SIGN_IN, "", SIGN_IN_PATH, 0, secure),
        ),
    ]);
    Ok((cookies, Redirect::to("/console")).into_response())
}

/// `POST /console/sign-out`: ends this session (a `read` one too).
pub(super) async fn sign_out(
    State(state): State<AppState>,
    signed: Signed,
    Form(form): Form<CsrfForm>,
) -> Result<Response, ConsoleError> {
    signed.check_csrf(&form.csrf_token)?;
    state.db.end_session(&signed.cookie).await?;
    Ok(signed_out(&state))
}

/// `POST /console/sign-out-everywhere`: ends every session of this account (or operator),
/// this one included. A change: a `read` session is refused.
pub(super) async fn sign_out_everywhere(
    State(state): State<AppState>,
    signed: Signed,
    Form(form): Form<CsrfForm>,
) -> Result<Response, ConsoleError> {
    signed.check_csrf(&form.csrf_token)?;
    signed.check_may_change()?;
    let ended = state.db.end_sessions_of(&signed.session.who).await?;
    tracing::info!(target: "kxp_sender", sessions = ended, "console: signed out everywhere");
    Ok(signed_out(&state))
}

/// The answer of a sign-in page: the page, and the cookie its form's token must match.
fn with_sign_in_cookie(state: &AppState, csrf_token: &str, page: String) -> Response {
    let secure = !state.shared.config.dev;
    // An hour to press the button; a later press gets 403 and a fresh page on reload.
    let cookie = cookies::set(SIGN_IN, csrf_token, SIGN_IN_PATH, 3600, secure);
    (AppendHeaders([(SET_COOKIE, cookie)]), Html(page)).into_response()
}

/// The key form again, saying the key did not sign in; no cookie is set.
fn wrong_key(csrf_token: &str) -> Response {
    let page = pages::key_form(csrf_token, true).into_string();
    (StatusCode::UNAUTHORIZED, Html(page)).into_response()
}

/// Back to the sign-in page, with the session cookie removed.
fn signed_out(state: &AppState) -> Response {
    let cookie = cookies::set(SESSION, "", "/console", 0, !state.shared.config.dev);
    (
        AppendHeaders([(SET_COOKIE, cookie)]),
        Redirect::to("/console/sign-in"),
    )
        .into_response()
}

/// One line per sign-in: who, and how; never the token, key or session id.
fn log_sign_in(session: &Session, is_link: bool) {
    let how = if is_link {
        "portal link"
    } else {
        "operator key"
    };
    tracing::info!(target: "kxp_sender", who = ?session.who, how, "console: signed in");
}
