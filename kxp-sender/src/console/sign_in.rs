//! Signing in and out. A portal link's page (`GET /console/sign-in/<token>`) and the
//! operators' key form (`GET /console/sign-in`) change nothing; their forms POST to
//! `/console/sign-in`, which consumes the link (or checks the key), opens a fresh session and
//! sets its cookie. Signing out ends this session, or every session of the same account or
//! operator. No token, key or cookie value is ever logged.
//!
//! The forms' CSRF token is signed by the server ([`SignInKey`](super::SignInKey)). A client
//! address with [`MAX_FAILURES`] failed sign-ins within a minute is answered 429 with
//! `Retry-After` until the oldest is a minute old, whatever it sends. Every attempt counts as
//! failed (a wrong key, an unusable link, a database error) unless it signs in or its CSRF
//! token is refused (no credential was tried). After a portal
//! link's sign-in the account's first page says which account the session is in, so that a
//! merchant sent a link to a look-alike account sees it.

use std::net::IpAddr;
use std::sync::{Arc, MutexGuard, PoisonError};

use axum::extract::{Path, State};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{AppendHeaders, Html, IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;
use tokio::time::Instant;

use super::client::ClientIp;
use super::cookies::{self, SESSION, SIGN_IN, SIGN_IN_PATH};
use super::error::ConsoleError;
use super::pages;
use super::session::{CsrfForm, Signed};
use super::sign_in_token::SignInKey;
use crate::app::AppState;
use crate::model::{KeyKind, Session};
use crate::policy::session::ABSOLUTE_EXPIRY_MS;
use crate::policy::sign_in::{Attempt, MAX_CLIENTS, MAX_FAILURES, SignInLimiter, WINDOW};
use crate::store::Opening;

/// The one-time message a portal link's sign-in leaves for the account's first page.
pub(super) const SIGNED_IN: &str = "signed-in";

/// What the sign-in forms post: the link page's token, or the key form's key.
#[derive(Deserialize)]
pub(super) struct SignInForm {
    /// Must equal the sign-in cookie the page set, and be signed by this server.
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
    Extension(key): Extension<Arc<SignInKey>>,
    Path(token): Path<String>,
) -> Response {
    let csrf_token = key.token();
    let page = pages::link_page(&token, &csrf_token);
    with_sign_in_cookie(&state, &csrf_token, page.into_string())
}

/// `GET /console/sign-in`: the operators' key form.
pub(super) async fn key_form(
    State(state): State<AppState>,
    Extension(key): Extension<Arc<SignInKey>>,
) -> Response {
    let csrf_token = key.token();
    let page = pages::key_form(&csrf_token, false);
    with_sign_in_cookie(&state, &csrf_token, page.into_string())
}

/// `POST /console/sign-in`: a portal link's token opens an account session (once); an
/// operator key opens an operator session. A wrong key gets the form again (401), and no
/// word of why.
pub(super) async fn sign_in(
    State(state): State<AppState>,
    Extension(key): Extension<Arc<SignInKey>>,
    ClientIp(client): ClientIp,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Result<Response, ConsoleError> {
    let counted = attempt(&state, client)?;
    let forgive = || {
        if let Some(at) = counted {
            failures(&state).forgive(client, at);
        }
    };
    let cookie = cookies::get(&headers, SIGN_IN).unwrap_or_default();
    if !from_own_origin(&headers) || !key.verify(&form.csrf_token, cookie) {
        forgive();
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
    // The account's first page takes it, and says which account this is.
    let flash = is_link.then(|| format!("{SIGNED_IN} "));
    let Some((session, id)) = state.db.open_session(opening, flash.as_deref()).await? else {
        return Err(ConsoleError::LinkUnusable);
    };
    forgive();
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

/// Whether the sign-in form was posted from the console's own pages, as far as the browser
/// says: `Sec-Fetch-Site` is `same-origin` (or `none`: typed, a bookmark), else `Origin` names
/// this host. A sibling subdomain can plant the sign-in cookie with a token the server signed
/// (any page of the console hands one out), so the signed token alone does not stop it posting
/// an attacker's credential in the victim's browser (login CSRF); the browser's word on where
/// the post came from does. A client that sends neither header (not a browser) is left to the
/// token.
fn from_own_origin(headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site") {
        return matches!(site, "same-origin" | "none");
    }
    match (header("origin"), header("host")) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host)),
        (Some(_), None) => false,
    }
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

/// The failed sign-ins of every client.
fn failures(state: &AppState) -> MutexGuard<'_, SignInLimiter> {
    state
        .shared
        .sign_in_failures
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Lets `client` try to sign in, counting the attempt as failed until it is forgiven (when
/// the table had room: else `None`), or refuses it (429) after too many failures. Says so in
/// the logs at a client's first refusal, and when there is no room left to count.
fn attempt(state: &AppState, client: IpAddr) -> Result<Option<Instant>, ConsoleError> {
    let decided = failures(state).attempt(client, crate::model::tokio_instant());
    match decided {
        Attempt::Counted { at } => Ok(Some(at)),
        Attempt::Untracked { report } => {
            if report {
                tracing::warn!(target: "kxp_sender", clients = MAX_CLIENTS,
                    "console: failed sign-ins come from more clients than are followed; new ones are not counted");
            }
            Ok(None)
        }
        Attempt::Refused { wait, report } => {
            if report {
                tracing::warn!(target: "kxp_sender", %client, failures = MAX_FAILURES,
                    window_secs = WINDOW.as_secs(),
                    "console: too many failed sign-ins from one client; its sign-ins are refused for a while");
            }
            Err(ConsoleError::TooManySignIns {
                retry_after: (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1),
            })
        }
    }
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
