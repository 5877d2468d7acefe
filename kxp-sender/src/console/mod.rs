//! The console: server-rendered HTML under `/console`, for people, beside the JSON API under
//! `/v1`, for programs. It shares the API's state and store, never its errors or its keys in a
//! browser: a browser holds a session cookie, opened by a one-time portal link (merchants) or
//! an operator key typed into a form (operators).
//!
//! - [`sign_in`]: the link page and the key form (GETs that change nothing), the POST that
//!   opens a session, and signing out (here, or everywhere).
//! - [`session`]: the [`Signed`](session::Signed) extractor (no live session: 303 to sign-in,
//!   never data) and the checks of every state-changing form: its CSRF token, in constant time,
//!   and a scope that may change things.
//! - [`cookies`]: the two cookies and their flags. [`headers`]: the security headers on every
//!   response. [`pages`]: the templates (maud: checked at compile time, escaped by default).
//!   [`error`]: each refusal with its status and page.
//!
//! Session rows and their expiries are the store's (`kxp_sessions`) and the policy's
//! (`policy::session`); this module only reads and ends them through [`Db`](crate::store::Db).

use axum::Router;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};

mod cookies;
mod error;
mod headers;
mod pages;
mod session;
mod sign_in;

use error::ConsoleError;
use pages::Who;
use session::Signed;

use crate::http::AppState;
use crate::model::SignedIn;

/// The console's stylesheet, embedded: nothing is fetched from the network.
const STYLESHEET: &str = include_str!("console.css");

/// The console's routes, and `/` (which sends browsers to it).
pub(crate) fn app(state: AppState) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(home))
        .route(
            "/console/sign-in",
            get(sign_in::key_form).post(sign_in::sign_in),
        )
        .route("/console/sign-in/{token}", get(sign_in::link_page))
        .route("/console/sign-out", post(sign_in::sign_out))
        .route(
            "/console/sign-out-everywhere",
            post(sign_in::sign_out_everywhere),
        )
        .route("/console/assets/console.css", get(stylesheet))
        // Any other console URL: sign in first, then a 404 page.
        .route("/console/{*rest}", get(not_found))
        .layer(axum::middleware::map_response(headers::secure))
        .with_state(state)
}

/// `GET /console`: who is signed in, and the sign-out buttons.
async fn home(State(state): State<AppState>, signed: Signed) -> Result<Response, ConsoleError> {
    let csrf_token = &signed.session.csrf_token;
    let page = match &signed.session.who {
        SignedIn::Account { account, scope } => {
            // Gone since the session opened (its sessions go with it): signed out.
            let account = state
                .db
                .account(account.as_str())
                .await?
                .ok_or(ConsoleError::SignInRequired)?;
            let who = Who::Account {
                name: &account.name,
                id: account.id.as_str(),
                scope,
            };
            pages::home(&who, csrf_token)
        }
        SignedIn::Operator(operator) => {
            let operator = state
                .db
                .operator(operator)
                .await?
                .ok_or(ConsoleError::SignInRequired)?;
            pages::home(
                &Who::Operator {
                    name: &operator.name,
                },
                csrf_token,
            )
        }
    };
    Ok(Html(page.into_string()).into_response())
}

/// `GET /console/assets/console.css`. It holds no session data, so it may be cached.
async fn stylesheet() -> Response {
    (
        [
            (CONTENT_TYPE, "text/css; charset=utf-8"),
            (CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLESHEET,
    )
        .into_response()
}

/// Any console URL with no page: signed-in browsers only (others are sent to sign in).
async fn not_found(_: Signed) -> ConsoleError {
    ConsoleError::NotFound
}
