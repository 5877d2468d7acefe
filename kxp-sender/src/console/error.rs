//! Why the console refused a request, each with its status and its page. The JSON API's errors
//! never appear here, nor these under `/v1`; a use case's refusal ([`crate::app::Error`]) is
//! shown on the form that asked, in its own words.

use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};

use super::pages;
use crate::app::Error;
use crate::store::StoreError;

/// A refused console request.
#[derive(Debug)]
pub(crate) enum ConsoleError {
    /// No live session: 303 to the sign-in page, never data.
    SignInRequired,
    /// The portal link is unknown, used or expired (not told apart): 410, nothing created.
    LinkUnusable,
    /// The form's `csrf_token` is missing or not this session's (or sign-in page's): 403, no
    /// change.
    CsrfMismatch,
    /// A `read` session asked to change something: 403, no change.
    ReadOnly,
    /// Too many failed sign-ins from this client lately: 429, with `Retry-After`, and nothing
    /// looked at.
    TooManySignIns {
        /// Seconds until the client may try again.
        retry_after: u64,
    },
    /// No such console page: 404.
    NotFound,
    /// The database failed: 503.
    Store(StoreError),
    /// A use case could not finish (its database failed): 503.
    Service(Error),
}

impl From<StoreError> for ConsoleError {
    fn from(e: StoreError) -> ConsoleError {
        ConsoleError::Store(e)
    }
}

/// A use case's "not found" is the console's 404 page; what else it did not finish, its 503.
/// (The refusals a form explains, such as a conflict, are shown by the page that asked.)
impl From<Error> for ConsoleError {
    fn from(e: Error) -> ConsoleError {
        match e {
            Error::NotFound => ConsoleError::NotFound,
            other => ConsoleError::Service(other),
        }
    }
}

/// The 503 page of a failed database (or use case), `error` logged.
fn unavailable(error: &dyn std::fmt::Display) -> (StatusCode, &'static str, &'static str) {
    tracing::error!(target: "kxp_sender", error = %error, "a console page failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "Unavailable",
        "The console cannot reach its database just now. Try again shortly.",
    )
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let mut retry_after = None;
        let (status, title, text) = match self {
            ConsoleError::SignInRequired => {
                return Redirect::to("/console/sign-in").into_response();
            }
            ConsoleError::LinkUnusable => (
                StatusCode::GONE,
                "This link does not work",
                "This sign-in link was already used, has expired, or never existed. Ask for a \
                 new one where you found it.",
            ),
            ConsoleError::CsrfMismatch => (
                StatusCode::FORBIDDEN,
                "Refused",
                "This form was not sent from the page the console gave you (or that page is \
                 too old). Nothing was changed: go back, reload the page and try again.",
            ),
            ConsoleError::ReadOnly => (
                StatusCode::FORBIDDEN,
                "Read only",
                "This session can look but not change anything. Nothing was changed.",
            ),
            ConsoleError::TooManySignIns { retry_after: wait } => {
                retry_after = Some(wait);
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many sign-in attempts",
                    "Too many sign-ins from your address failed in the last minute, so this one \
                     was not tried. Wait a minute and try again.",
                )
            }
            ConsoleError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is no such page in the console.",
            ),
            ConsoleError::Store(e) => unavailable(&e),
            ConsoleError::Service(e) => unavailable(&e),
        };
        let mut response =
            (status, Html(pages::message(title, text).into_string())).into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
