//! The console: server-rendered HTML under `/console`, for people, beside the JSON API under
//! `/v1`, for programs. It shares the API's state and store, never its errors or its keys in a
//! browser: a browser holds a session cookie, opened by a one-time portal link (merchants) or
//! an operator key typed into a form (operators).
//!
//! - [`sign_in`]: the link page and the key form (GETs that change nothing), the POST that
//!   opens a session, and signing out (here, or everywhere). [`sign_in_token`]: the sign-in
//!   forms' signed CSRF tokens. [`client`]: which address a sign-in comes from, for the limit
//!   on failed sign-ins.
//! - [`session`]: the [`Signed`](session::Signed) extractor (no live session: 303 to sign-in,
//!   never data) and the checks of every state-changing form: its CSRF token, in constant time,
//!   and a scope that may change things.
//! - [`cookies`]: the two cookies and their flags. [`headers`]: the security headers on every
//!   response. [`pages`]: the templates (maud: checked at compile time, escaped by default).
//!   [`error`]: each refusal with its status and page.
//!
//! Session rows and their expiries are the store's (`kxp_sessions`) and the policy's
//! (`policy::session`); this module only reads and ends them through [`Db`](crate::store::Db).

use std::sync::Arc;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};

mod client;
mod cookies;
mod credentials;
mod dead_letters;
mod endpoints;
mod erasures;
mod error;
mod events;
mod filters;
mod headers;
mod listen;
mod operators;
mod pages;
mod scope;
mod session;
mod sign_in;
mod sign_in_token;

pub(crate) use sign_in_token::SignInKey;

use error::ConsoleError;
use session::Signed;

use crate::app::AppState;

/// The console's stylesheet, embedded: nothing is fetched from the network.
const STYLESHEET: &str = include_str!("console.css");

/// The console's one script (copy buttons), embedded: the pages work without it.
const SCRIPT: &str = include_str!("console.js");

/// The console's routes, and `/` (which sends browsers to it).
/// The console's routes, with `sign_in_key` for its sign-in pages' CSRF tokens (the console's
/// own: the service below it knows nothing of pages or their tokens).
pub(crate) fn app(state: AppState, sign_in_key: SignInKey) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(operators::home))
        .route("/console/audit", get(operators::audit))
        .route("/console/notifications", get(operators::notifications))
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
        .route("/console/a/{account}", get(endpoints::list))
        .route("/console/a/{account}/endpoints", post(endpoints::create))
        .route(
            "/console/a/{account}/endpoints/new",
            get(endpoints::new_form),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}",
            get(endpoints::show),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/pause",
            post(endpoints::pause),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/resume",
            post(endpoints::resume),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/rotate",
            post(endpoints::rotate),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/rotate-when-confirmed",
            post(endpoints::rotate_when_confirmed),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/test",
            post(endpoints::test),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/edit",
            get(endpoints::edit_form).post(endpoints::edit),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/credentials",
            get(credentials::form),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/credentials/headers",
            post(credentials::headers),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/credentials/auth",
            post(credentials::auth),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/credentials/tls",
            post(credentials::tls),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/filter",
            get(filters::form).post(filters::save),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/filter/try",
            post(filters::try_it),
        )
        .route(
            "/console/a/{account}/endpoints/{endpoint}/delete",
            get(endpoints::delete_form).post(endpoints::delete),
        )
        .route(
            "/console/a/{account}/listen",
            get(listen::show).post(listen::make),
        )
        .route("/console/a/{account}/events", get(events::search))
        .route("/console/a/{account}/events/{event}", get(events::show))
        .route(
            "/console/a/{account}/deliveries/{delivery}",
            get(events::delivery),
        )
        .route(
            "/console/a/{account}/deliveries/{delivery}/replay",
            post(events::replay),
        )
        .route("/console/a/{account}/dead-letters", get(dead_letters::list))
        .route(
            "/console/a/{account}/erasures",
            get(erasures::list).post(erasures::erase),
        )
        .route(
            "/console/a/{account}/dead-letters/replay",
            get(dead_letters::confirm).post(dead_letters::replay_all),
        )
        .route("/console/assets/console.css", get(stylesheet))
        .route("/console/assets/console.js", get(script))
        // Any other console URL: sign in first, then a 404 page.
        .route("/console/{*rest}", get(not_found))
        .layer(axum::middleware::map_response(headers::secure))
        .layer(Extension(Arc::new(sign_in_key)))
        .with_state(state)
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

/// `GET /console/assets/console.js`. Like the stylesheet, it holds no session data.
async fn script() -> Response {
    (
        [
            (CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (CACHE_CONTROL, "public, max-age=3600"),
        ],
        SCRIPT,
    )
        .into_response()
}

/// Any console URL with no page: signed-in browsers only (others are sent to sign in).
async fn not_found(_: Signed) -> ConsoleError {
    ConsoleError::NotFound
}
